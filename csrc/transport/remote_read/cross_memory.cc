#include "transport/remote_read/cross_memory.h"

#include <sys/uio.h>

#include <cerrno>
#include <cstring>

#include "transport/host_identity.h"

namespace monarch {

namespace {

// process_vm_readv and process_vm_writev take the same arguments: the local
// buffer first, then the remote one.
using CrossCopy = ssize_t (*)(pid_t, const iovec*, unsigned long, const iovec*, unsigned long, unsigned long);

// Copies between `local` and `region` of `pid` until every byte has moved.
bool copyAll(CrossCopy copy, const char* name, pid_t pid, const RemoteRegion& region, char* local, std::string* error) {
  uint64_t done = 0;
  while (done < region.bytes) {
    iovec mine{local + done, region.bytes - done};
    iovec theirs{reinterpret_cast<void*>(region.address + done), region.bytes - done};
    ssize_t n = copy(pid, &mine, 1, &theirs, 1, 0);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      *error = std::string(name) + ": " + (n < 0 ? std::strerror(errno) : "no progress");
      return false;
    }
    done += static_cast<uint64_t>(n);
  }
  return true;
}

} // namespace

bool canReadFrom(pid_t pid, uint64_t probeAddress) {
  uint64_t value = 0;
  std::string error;
  return readRemote(pid, RemoteRegion{probeAddress, sizeof(value)}, &value, &error) && value == kProbeWord;
}

bool readRemote(pid_t pid, const RemoteRegion& region, void* dest, std::string* error) {
  return copyAll(::process_vm_readv, "process_vm_readv", pid, region, static_cast<char*>(dest), error);
}

bool writeRemote(pid_t pid, const RemoteRegion& region, const void* src, std::string* error) {
  // The kernel only reads the local buffer of a write.
  return copyAll(
      ::process_vm_writev, "process_vm_writev", pid, region, static_cast<char*>(const_cast<void*>(src)), error);
}

} // namespace monarch
