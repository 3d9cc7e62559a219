#include "transport/host_identity.h"

#include <unistd.h>

#include <fstream>
#include <string>

#include "transport/wire.h"

namespace monarch {

namespace {

// In memory, for peers to read (a constexpr alone may have no address).
const uint64_t probeWord = kProbeWord;

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
  return reinterpret_cast<uint64_t>(&probeWord);
}

} // namespace monarch
