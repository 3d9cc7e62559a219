#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace monarch {

// What went wrong with an op. Mirrors the Python exception hierarchy in
// torch_monarch/errors.py; the numeric values travel on the wire in error
// notices, so never renumber them.
enum class ErrorKind : uint8_t {
  kNone = 0,
  kPeerFailure = 1, // a peer process died, hung or its link broke
  kTimeout = 2, // the op did not finish within its timeout
  kAborted = 3, // abort() was called on this group
  kMismatch = 4, // ranks disagreed on the op, dtype, count or root
  kProtocol = 5, // corrupt or unexpected bytes on a link
};

const char* errorKindName(ErrorKind kind);

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
