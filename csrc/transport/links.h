#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "transport/shared_regions.h"
#include "transport/wire.h"

namespace monarch {

// The only thing the algorithms know about the transport: post a send or a
// receive of a buffer region to one peer within the current op, and wait for
// it. Transfers between a pair are matched in the order they are posted.
// Waiting throws OpFailure when the op cannot finish.
class Links {
 public:
  using Handle = size_t;

  virtual ~Links() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // The host a rank runs on: ranks with equal values share one. Every rank of
  // the group sees the same values.
  virtual uint64_t hostOf(int rank) const = 0;
  virtual Handle send(int peer, const void* data, size_t bytes) = 0;
  virtual Handle recv(int peer, void* data, size_t bytes) = 0;
  virtual void wait(Handle handle) = 0;
  // Waits for every transfer posted in the current op.
  virtual void waitAll() = 0;

  // The current op: its sequence number and what this rank called.
  virtual uint64_t sequence() const = 0;
  virtual const OpSignature& signature() const = 0;
  // Sends `peer` this op's signature in a frame of nothing else that nobody
  // waits for; the peer compares it with its own on arrival and fails the
  // group on a mismatch. A rank that will wait for data from `peer`
  // announces itself first (kIfBlocking), so that two ranks that each wait
  // for the other (say, each named the other as the root) find out instead
  // of hanging: the frame leaves when this rank first has to block in the
  // op, so it costs nothing while the data is there already (then nobody
  // waits for this rank either). An op that moves nothing announces itself
  // to every peer at once (kNow), since it never blocks.
  enum class Announce { kNow, kIfBlocking };
  virtual void announce(int peer, Announce when) = 0;
  // Fails the group for every rank (CollectiveMismatchError, told to every
  // peer) because `peer` ran this op otherwise, as `how` says; throws
  // OpFailure.
  [[noreturn]] virtual void failMismatch(int peer, const std::string& how) = 0;

  // Scratch memory for the current op, kept across ops so that its pages are
  // faulted in once per group rather than once per op (which costs more than
  // the reduction itself for large tensors). Valid until the next call with
  // the same slot.
  enum class Workspace { kAlgorithm, kStaging, kResult };
  virtual void* workspace(size_t bytes, Workspace slot) = 0;

  // The ranks on this rank's host, this one included, in rank order.
  std::vector<int> ranksOnThisHost() const {
    std::vector<int> ranks;
    for (int peer = 0; peer < size(); ++peer) {
      if (hostOf(peer) == hostOf(rank())) {
        ranks.push_back(peer);
      }
    }
    return ranks;
  }

  // Memory shared with the ranks of this rank's host: region i belongs to
  // the i-th of ranksOnThisHost(). Null when the links cannot share memory
  // or this rank is alone on its host. The first call sets it up with those
  // ranks inside the current op, so each of them must make it at the same
  // point of the same op (the algorithms do, deciding by message size);
  // ranks on other hosts take no part.
  virtual SharedRegions* hostRegions() {
    return nullptr;
  }
  // Memory shared with every peer: hostRegions() when all ranks share one
  // host, null otherwise.
  SharedRegions* sharedRegions() {
    return static_cast<int>(ranksOnThisHost().size()) == size() ? hostRegions() : nullptr;
  }
};

} // namespace monarch
