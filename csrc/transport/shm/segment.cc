#include "transport/shm/segment.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>

#include "common/logging.h"

namespace monarch {

namespace {

constexpr char kPrefix[] = "monarch-";

std::string systemError(const char* call) {
  return std::string(call) + ": " + std::strerror(errno);
}

void* mapShared(int fd, size_t bytes, std::string* error) {
  // MAP_POPULATE faults every page in now, once per group, instead of in
  // the first op that touches it.
  void* address = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (address == MAP_FAILED) {
    *error = systemError("mmap");
    return nullptr;
  }
  return address;
}

// The creator's pid from a segment name in /dev/shm, or -1.
pid_t creatorOf(const char* entry) {
  if (std::strncmp(entry, kPrefix, sizeof(kPrefix) - 1) != 0) {
    return -1;
  }
  long pid = -1;
  if (std::sscanf(entry + sizeof(kPrefix) - 1, "%ld-", &pid) != 1 || pid <= 0) {
    return -1;
  }
  return static_cast<pid_t>(pid);
}

} // namespace

std::string segmentName(pid_t pid, uint64_t endpointId, uint64_t channelId) {
  char name[96];
  std::snprintf(
      name, sizeof(name), "/%s%ld-%016" PRIx64 "-%016" PRIx64, kPrefix, static_cast<long>(pid), endpointId, channelId);
  return name;
}

std::unique_ptr<SharedSegment> SharedSegment::create(const std::string& name, size_t bytes, std::string* error) {
  int fd = ::shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  if (fd < 0) {
    *error = systemError("shm_open");
    return nullptr;
  }
  int reserved = ::posix_fallocate(fd, 0, static_cast<off_t>(bytes));
  void* address = nullptr;
  if (reserved != 0) {
    *error = std::string("reserving ") + std::to_string(bytes) + " bytes in /dev/shm: " + std::strerror(reserved);
  } else {
    address = mapShared(fd, bytes, error);
  }
  ::close(fd);
  if (!address) {
    ::shm_unlink(name.c_str());
    return nullptr;
  }
  return std::unique_ptr<SharedSegment>(new SharedSegment(name, address, bytes, /*owned=*/true));
}

std::unique_ptr<SharedSegment> SharedSegment::open(const std::string& name, size_t bytes, std::string* error) {
  int fd = ::shm_open(name.c_str(), O_RDWR, 0);
  if (fd < 0) {
    *error = systemError("shm_open");
    return nullptr;
  }
  struct stat info{};
  void* address = nullptr;
  if (::fstat(fd, &info) != 0) {
    *error = systemError("fstat");
  } else if (static_cast<size_t>(info.st_size) != bytes) {
    // Options.shm_segment_bytes differs between the ranks.
    *error = "segment " + name + " has " + std::to_string(info.st_size) + " bytes, expected " + std::to_string(bytes);
  } else {
    address = mapShared(fd, bytes, error);
  }
  ::close(fd);
  if (!address) {
    return nullptr;
  }
  return std::unique_ptr<SharedSegment>(new SharedSegment(name, address, bytes, /*owned=*/false));
}

void SharedSegment::unlinkName(const std::string& name) {
  ::shm_unlink(name.c_str());
}

void SharedSegment::unlink() {
  if (named_) {
    unlinkName(name_);
    named_ = false;
  }
}

SharedSegment::~SharedSegment() {
  unlink();
  ::munmap(address_, bytes_);
}

void removeStaleSegments() {
  DIR* dir = ::opendir("/dev/shm");
  if (!dir) {
    return;
  }
  while (dirent* entry = ::readdir(dir)) {
    pid_t creator = creatorOf(entry->d_name);
    if (creator > 0 && ::kill(creator, 0) != 0 && errno == ESRCH) {
      MONARCH_LOG(kInfo) << "removing stale shared-memory segment /dev/shm/" << entry->d_name << " (process " << creator
                         << " is gone)";
      SharedSegment::unlinkName(std::string("/") + entry->d_name);
    }
  }
  ::closedir(dir);
}

} // namespace monarch
