#include "transport/remote_read.h"

#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "transport/wire.h"

namespace monarch {

namespace {

const uint64_t kProbeWord = 0x6d6f6e6172636821ull; // "monarch!"

} // namespace

uint64_t localHostId() {
  std::string id;
  std::ifstream bootId("/proc/sys/kernel/random/boot_id");
  std::getline(bootId, id);
  char hostname[256] = {0};
  ::gethostname(hostname, sizeof(hostname) - 1);
  id += hostname;
  return fnv1a64(id.data(), id.size());
}

uint64_t probeWordAddress() {
  return reinterpret_cast<uint64_t>(&kProbeWord);
}

bool canReadFrom(pid_t pid, uint64_t probeAddress) {
  uint64_t value = 0;
  std::string error;
  return readRemote(pid, RemoteRegion{probeAddress, sizeof(value)}, &value, &error) && value == kProbeWord;
}

bool readRemote(pid_t pid, const RemoteRegion& region, void* dest, std::string* error) {
  auto* out = static_cast<char*>(dest);
  uint64_t done = 0;
  while (done < region.bytes) {
    iovec local{out + done, region.bytes - done};
    iovec remote{reinterpret_cast<void*>(region.address + done), region.bytes - done};
    ssize_t n = ::process_vm_readv(pid, &local, 1, &remote, 1, 0);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      *error = std::string("process_vm_readv: ") + (n < 0 ? std::strerror(errno) : "no progress");
      return false;
    }
    done += static_cast<uint64_t>(n);
  }
  return true;
}

} // namespace monarch
