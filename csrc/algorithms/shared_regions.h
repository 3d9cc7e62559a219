#pragma once

#include <cstddef>
#include <cstdint>

namespace monarch {

// Memory that every rank of a one-host group maps: one region per rank, the
// same size for all, written by its owner and read by the others, and a
// barrier that meets in that memory. The shared-memory algorithms
// (shared_memory.cc) run in rounds, each through one half of every region,
// alternating; `rounds` persists across ops so that the alternation goes on
// from one op to the next.
class SharedRegions {
 public:
  virtual ~SharedRegions() = default;

  virtual size_t bytesPerRegion() const = 0;
  // `rank`'s region, mapped in this process.
  virtual char* region(int rank) const = 0;
  // Returns once every rank has made as many calls as this one. Throws
  // OpFailure, like Links::wait, when the group breaks or aborts or the op's
  // deadline passes first.
  virtual void barrier() = 0;

  uint64_t rounds = 0;
};

} // namespace monarch
