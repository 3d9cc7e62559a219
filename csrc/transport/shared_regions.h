#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>

namespace monarch {

// Where an op's buffer lies in a rank's block of its SharedTensorPool
// (transport/shm/tensor_pool.h); block 0 when it is not in one.
struct PoolSpan {
  int64_t pid = 0;
  uint64_t block = 0;
  uint64_t blockBytes = 0;
  uint64_t offset = 0;

  bool inPool() const {
    return block != 0;
  }
};

// Where an op's input and output lie on a rank: in its pool, and in its
// address space for the peers' cross-memory copies
// (algorithms/cross_memory_direct.h). The shared-memory ops learn their
// peers' through the op's agreement (algorithms/shared_signature.h).
struct BufferPlaces {
  PoolSpan input;
  PoolSpan output;
  int64_t pid = 0;
  uint64_t inputAddress = 0;
  uint64_t outputAddress = 0;
};

// Memory that every rank of a one-host group maps: one region per rank, the
// same size for all, written by its owner and read by the others, and a
// barrier that meets in that memory. The shared-memory algorithms
// (shared_memory.cc, shared_allreduce.cc) run in rounds, each through one
// half of every region, alternating; `rounds` persists across ops so that
// the alternation goes on from one op to the next.
class SharedRegions {
 public:
  // Most tiles a round of the tile-by-tile allreduce may have.
  static constexpr size_t kMaxTiles = 128;

  virtual ~SharedRegions() = default;

  virtual size_t bytesPerRegion() const = 0;
  // `rank`'s region, mapped in this process.
  virtual char* region(int rank) const = 0;
  // Returns once every rank has made as many calls as this one. Throws
  // OpFailure, like Links::wait, when the group breaks or aborts or the op's
  // deadline passes first.
  virtual void barrier() = 0;

  // Words of the tile-by-tile allreduce (shared_allreduce.cc), zero at first:
  // `rank`'s mark that it has published `tile`, written by that rank only;
  // who claimed `tile`, and the mark that it is reduced, written by the
  // rank that claimed it.
  virtual std::atomic<uint64_t>& published(int rank, size_t tile) const = 0;
  virtual std::atomic<uint64_t>& claimed(size_t tile) const = 0;
  virtual std::atomic<uint64_t>& reduced(size_t tile) const = 0;
  // Stores `value` into one of the words a peer may await (release), waking
  // any thread of any rank that sleeps in await().
  virtual void store(std::atomic<uint64_t>& word, uint64_t value) = 0;
  // Returns `word`'s value once ready(value) holds. Past a short spin it
  // checks the group between looks and throws OpFailure, as barrier() does,
  // naming rank waitedOn(value) (-1: no rank in particular); past a longer
  // one it sleeps until a store(). Every word awaited is written by store().
  virtual uint64_t await(
      const std::atomic<uint64_t>& word,
      const std::function<bool(uint64_t)>& ready,
      const std::function<int(uint64_t)>& waitedOn) = 0;

  // `rank`'s pool block of `span` mapped in this process, at the span's
  // offset (the mapping is kept for the group's life); null, logged, when it
  // cannot be mapped.
  virtual char* poolBlock(int rank, const PoolSpan& span) = 0;

  uint64_t rounds = 0;
};

} // namespace monarch
