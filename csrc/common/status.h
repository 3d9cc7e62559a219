#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace monarch {

// The one table of failure kinds: X(enumerator, wire value, display name,
// torch_monarch.errors class). The enum, errorKindName(), the exception the
// binding raises and errors.py's lookup of error_info() kinds all come from
// it. The values travel on the wire in error notices, so never renumber them.
#define MONARCH_ERROR_KINDS(X)                                                                  \
  X(kNone, 0, "ok", "MonarchError") /* never raised */                                          \
  X(kPeerFailure, 1, "peer failure", "PeerFailureError") /* a peer died, hung or its link broke */ \
  X(kTimeout, 2, "timeout", "CollectiveTimeoutError") /* not finished within its timeout */      \
  X(kAborted, 3, "aborted", "AbortedError") /* abort() was called on this group */               \
  X(kMismatch, 4, "collective mismatch", "CollectiveMismatchError") /* op, dtype, count, root */ \
  X(kProtocol, 5, "protocol error", "ProtocolError") /* corrupt or unexpected bytes on a link */

enum class ErrorKind : uint8_t {
#define MONARCH_ERROR_KIND_ENUMERATOR(kind, value, name, pythonClass) kind = value,
  MONARCH_ERROR_KINDS(MONARCH_ERROR_KIND_ENUMERATOR)
#undef MONARCH_ERROR_KIND_ENUMERATOR
};

// "peer failure", ... as error_info() and messages show them.
const char* errorKindName(ErrorKind kind);
// The torch_monarch.errors class raised for `kind`.
const char* errorClassName(ErrorKind kind);
// Whether a byte from the wire names a failure: a kind of the table but kNone.
bool isFailureKind(uint8_t value);

// The outcome of an op or of one transfer. Ranks are group ranks.
struct Status {
  ErrorKind kind = ErrorKind::kNone;
  std::vector<int> ranks;
  std::string message;

  bool ok() const {
    return kind == ErrorKind::kNone;
  }

  static Status error(ErrorKind kind, std::vector<int> ranks, std::string message) {
    return Status{kind, std::move(ranks), std::move(message)};
  }
};

// Renders ranks as "[0, 3]" for messages.
std::string formatRanks(const std::vector<int>& ranks);

} // namespace monarch
