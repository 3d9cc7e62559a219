#pragma once

#include <cstddef>
#include <cstdint>

#include "algorithms/shared_regions.h"

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

  // Scratch memory for the current op, kept across ops so that its pages are
  // faulted in once per group rather than once per op (which costs more than
  // the reduction itself for large tensors). Valid until the next call with
  // the same slot.
  enum class Workspace { kAlgorithm, kStaging };
  virtual void* workspace(size_t bytes, Workspace slot) = 0;

  // Memory shared with every peer, when all ranks share one host and the
  // transport allows it; null otherwise. The first call sets it up with the
  // peers inside the current op, so every rank must make it at the same
  // point of the same op (the algorithms do, deciding by message size).
  virtual SharedRegions* sharedRegions() {
    return nullptr;
  }
};

} // namespace monarch
