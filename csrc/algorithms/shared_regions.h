#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace monarch {

// Memory that every rank of a one-host group maps: one region per rank, the
// same size for all, written by its owner and read by the others. The
// shared-memory algorithms (shared_memory.cc) run in rounds, each through
// one half of every region, alternating; `rounds` persists across ops so
// that the alternation continues from one op to the next.
struct SharedRegions {
  std::vector<char*> byRank;
  size_t bytesPerRegion = 0;
  uint64_t rounds = 0;
};

} // namespace monarch
