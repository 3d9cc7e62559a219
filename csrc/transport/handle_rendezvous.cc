#include "transport/handle_rendezvous.h"

#include <arpa/inet.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <sstream>
#include <stdexcept>

namespace monarch {

namespace {

constexpr const char* kTag = "monarch-endpoint/1";

std::string hex64(uint64_t value) {
  char text[17];
  std::snprintf(text, sizeof(text), "%016" PRIx64, value);
  return text;
}

// `text` as an unsigned number of `base` no larger than `max`, or throws.
uint64_t parseNumber(const std::string& field, const std::string& text, int base, uint64_t max) {
  if (text.empty() || text.size() > 20) {
    throw std::invalid_argument("field '" + field + "' is empty or too long");
  }
  char* end = nullptr;
  errno = 0;
  unsigned long long value = std::strtoull(text.c_str(), &end, base);
  if (errno != 0 || end != text.c_str() + text.size() || text[0] == '-' || text[0] == '+' || value > max) {
    throw std::invalid_argument("field '" + field + "' is not a number: '" + text + "'");
  }
  return value;
}

} // namespace

uint64_t jobFingerprint(const JobToken& token) {
  return fnv1a64(token.data(), token.size(), fnv1a64("monarch-job", 11));
}

JobToken jobTokenOf(const std::string& job) {
  JobToken token;
  uint64_t halves[2] = {fnv1a64(job.data(), job.size(), fnv1a64("monarch-job-a", 13)),
                        fnv1a64(job.data(), job.size(), fnv1a64("monarch-job-b", 13))};
  static_assert(sizeof(halves) == kTokenBytes, "a job token is two 64-bit halves");
  std::memcpy(token.data(), halves, kTokenBytes);
  return token;
}

std::string EndpointHandle::format() const {
  return std::string(kTag) + " job=" + hex64(jobFingerprint) + " endpoint=" + hex64(endpointId) +
      " addr=" + address() + " pid=" + std::to_string(pid) + " host=" + hex64(hostId);
}

EndpointHandle EndpointHandle::parse(const std::string& text) {
  std::istringstream words(text);
  std::string tag;
  words >> tag;
  if (tag != kTag) {
    throw std::invalid_argument(
        "not a monarch reconfigure handle (it starts with '" + tag.substr(0, 40) + "', expected '" + kTag + "')");
  }
  std::map<std::string, std::string> fields;
  for (std::string word; words >> word;) {
    auto equals = word.find('=');
    if (equals == std::string::npos || !fields.emplace(word.substr(0, equals), word.substr(equals + 1)).second) {
      throw std::invalid_argument("malformed or repeated field '" + word.substr(0, 40) + "'");
    }
  }
  auto field = [&](const std::string& name) {
    auto it = fields.find(name);
    if (it == fields.end()) {
      throw std::invalid_argument("field '" + name + "' is missing");
    }
    return it->second;
  };
  EndpointHandle handle;
  handle.jobFingerprint = parseNumber("job", field("job"), 16, UINT64_MAX);
  handle.endpointId = parseNumber("endpoint", field("endpoint"), 16, UINT64_MAX);
  handle.pid = static_cast<uint32_t>(parseNumber("pid", field("pid"), 10, UINT32_MAX));
  handle.hostId = parseNumber("host", field("host"), 16, UINT64_MAX);
  std::string address = field("addr");
  auto colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    throw std::invalid_argument("field 'addr' is not host:port: '" + address + "'");
  }
  handle.host = address.substr(0, colon);
  in_addr parsed{};
  if (::inet_pton(AF_INET, handle.host.c_str(), &parsed) != 1) {
    throw std::invalid_argument("field 'addr' does not name an IPv4 address: '" + address + "'");
  }
  handle.port = static_cast<uint16_t>(parseNumber("addr", address.substr(colon + 1), 10, UINT16_MAX));
  if (fields.size() != 5) {
    throw std::invalid_argument("unknown fields (expected job, endpoint, addr, pid and host)");
  }
  return handle;
}

bool HandleRendezvous::gone(int rank) {
  const EndpointHandle& member = members_.at(rank);
  auto deadline = Clock::now() + probeTimeout_;
  try {
    Socket socket = connectTo(member.host, member.port, deadline, /*retryRefused=*/false);
    // Said as a probe, so that the endpoint closes it without logging.
    JobToken none{};
    Handshake probe = makeHandshake(none.data(), 0, kHandleEpoch, kProbeRank, 0, 0, 0);
    std::string error;
    writeExact(socket.fd(), &probe, sizeof(probe), deadline, &error);
    return false; // it listens: the process is there, only late
  } catch (const ConnectionRefused&) {
    return true;
  } catch (const std::exception&) {
    return false; // no answer in time: cannot tell
  }
}

} // namespace monarch
