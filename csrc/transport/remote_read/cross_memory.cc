#include "transport/remote_read/cross_memory.h"

#include <sys/uio.h>

#include <cerrno>
#include <cstring>

#include "transport/host_identity.h"

namespace monarch {

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
