#include "common/status.h"

#include <sstream>

namespace monarch {

const char* errorKindName(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kNone:
      return "ok";
    case ErrorKind::kPeerFailure:
      return "peer failure";
    case ErrorKind::kTimeout:
      return "timeout";
    case ErrorKind::kAborted:
      return "aborted";
    case ErrorKind::kMismatch:
      return "collective mismatch";
    case ErrorKind::kProtocol:
      return "protocol error";
  }
  return "unknown";
}

std::string formatRanks(const std::vector<int>& ranks) {
  std::ostringstream out;
  out << "[";
  for (size_t i = 0; i < ranks.size(); ++i) {
    out << (i ? ", " : "") << ranks[i];
  }
  out << "]";
  return out.str();
}

} // namespace monarch
