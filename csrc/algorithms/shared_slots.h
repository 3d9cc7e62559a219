#pragma once

// The slots of the shared-memory collectives (shared_memory.cc,
// shared_allreduce.cc, shared_blocks.cc, shared_personalized.cc): each round uses one half of every
// rank's region, the next round the other.

#include <algorithm>
#include <cstddef>

#include "algorithms/collectives.h"

namespace monarch {

constexpr size_t kSlotAlignment = 64;

// `bytes` of a slot split into one aligned piece for each peer of its owner,
// among `n` ranks (0 where they do not fit).
inline size_t piecePerPeer(size_t bytes, int n) {
  return bytes / static_cast<size_t>(std::max(1, n - 1)) / kSlotAlignment * kSlotAlignment;
}

// Which of those pieces in `owner`'s slot is `peer`'s: rank order, the owner
// left out.
inline size_t placeInSlot(int peer, int owner) {
  return static_cast<size_t>(peer < owner ? peer : peer - 1);
}

// The chunk of a `count`-element tensor of `elementBytes` elements that
// `rank` of `n` reduces in the allreduces that read every rank's tensor
// where it lies (shared_direct.h, cross_memory_direct.h): whole cache lines,
// so that no two ranks write one line.
struct ChunkOfRank {
  size_t begin;
  size_t length;
};
inline ChunkOfRank chunkOfRank(size_t count, size_t elementBytes, int n, int rank) {
  const size_t line = std::max<size_t>(1, kSlotAlignment / elementBytes);
  const size_t chunk = ((count + n - 1) / n + line - 1) / line * line;
  const size_t begin = std::min(count, chunk * static_cast<size_t>(rank));
  return {begin, std::min(chunk, count - begin)};
}

// Whether an op of `bytes` (the whole message) writes its results with
// streaming stores: the caller's buffers are then too large to stay in
// cache, and skipping the read before each write made 256 MB allreduces
// 13-23% faster at worlds 4 and 8 on the 16-core test machine (64 MB: 0-16%;
// 16 MB, where the buffers stay in its 300 MiB L3: slower); the
// reduce-scatter's results, 1.00-1.15x at 64 and 256 MB (worlds 2-8, one
// thread per rank; 0.94-1.09x at 16 MB).
inline bool writesResultsStreaming(size_t bytes) {
  return bytes >= 64 * 1024 * 1024;
}

// The group's shared regions when a message of `bytes` should go through
// them, else null.
inline SharedRegions* regionsFor(Links& links, size_t bytes, const AlgorithmConfig& config) {
  return bytes >= config.shmMinBytes ? links.sharedRegions() : nullptr;
}

// Each region ends with the stamps of shared_signature.cc, the word saying
// which op its owner last agreed on and its answer in everyRankCan; the two
// halves of slots take the rest.
constexpr size_t kStampBytes = 2 * kSlotAlignment;
constexpr size_t kStamps = 2;
constexpr size_t kStampAreaBytes = (kStamps + 2) * kStampBytes;

inline size_t slotBytes(const SharedRegions& regions) {
  return (regions.bytesPerRegion() - kStampAreaBytes) / 2 / kSlotAlignment * kSlotAlignment;
}

inline char* stampsOf(const SharedRegions& regions, int rank) {
  return regions.region(rank) + 2 * slotBytes(regions);
}

// `rank`'s half of its region in the current round.
inline char* slotOf(const SharedRegions& regions, int rank) {
  return regions.region(rank) + (regions.rounds % 2) * slotBytes(regions);
}

} // namespace monarch
