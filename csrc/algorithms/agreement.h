#pragma once

// How ranks that disagree about an op all find out within it, at no round
// trip. Every data frame carries the op's signature (op, dtype, count, root,
// reduce op; transport/wire.h) and the receiver compares it with its own,
// but in some ops a rank receives nothing (a broadcast's root), or nothing
// from a rank that disagrees (one that named another root sends elsewhere),
// and in the shared-memory algorithms no data frame moves at all.
//
// An OpAgreement posts, first thing in the op, an empty message to every
// peer and a receive for every peer's: these are each pair's first messages
// of the op, so each is matched against the peer's, and their headers carry
// the signatures. A rank that sees a signature other than its own fails the
// group at once (CollectiveMismatchError) and tells every peer. Since every
// rank hears from every peer, every rank of a disagreeing op sees a
// signature other than its own and raises in that op, a pure sender
// included, without waiting for a notice.
//
// The messages cross the op's data instead of following it: a rank waits
// for them only when it is done with its own part (confirm()), by when they
// have long arrived unless a peer entered the op late. The cost is n-1
// empty messages each way per rank and that no rank finishes the op before
// every rank has entered it -- not a round trip after the data, as a
// barrier would be.

#include <vector>

#include "transport/links.h"

namespace monarch {

class OpAgreement {
 public:
  // Posts the messages; must come before any other transfer of the op.
  explicit OpAgreement(Links& links);
  // Returns once every peer's signature has arrived and matched; throws
  // OpFailure (a mismatch, or whatever else broke the op) otherwise.
  void confirm();

 private:
  Links& links_;
  std::vector<Links::Handle> handles_;
};

} // namespace monarch
