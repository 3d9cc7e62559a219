// The shared-memory allreduce and reduce (see shared_memory.h), in rounds
// of one slot per rank like the other shared-memory collectives, but with
// no barrier inside a round: the ranks wait for each other tile by tile. A
// reduce is the allreduce with only the root copying the results out.

#include <algorithm>
#include <atomic>
#include <cstring>
#include <vector>

#include "algorithms/cross_memory_direct.h"
#include "algorithms/parallel.h"
#include "algorithms/reduce_kernels.h"
#include "algorithms/shared_direct.h"
#include "algorithms/shared_memory.h"
#include "algorithms/shared_signature.h"
#include "algorithms/shared_slots.h"
#include "common/helper_pool.h"
#include "transport/shm/tensor_pool.h"

namespace monarch {

namespace {

// One round of the allreduce, tile by tile, with no barrier. Every rank
// publishes its chunk into its slot tile by tile; any thread of any rank
// claims the next tile and, once every rank has published it, reduces it
// into the first rank's slot; every rank copies each tile out as soon as it
// is reduced. A rank that falls behind (descheduled, on a busier core)
// holds up only the tiles it has not published or claimed, where barriers
// between the phases would hold every rank up twice a round.
//
// A rank writes its half of the slots again two rounds later. By then it
// has copied out every tile of the round between, each reduced only after
// every rank had published it, which each did only after finishing the
// round before: no rank still reads the half. A rank that does not copy the
// results out (a reduce's non-root) still waits for every tile to be
// reduced, for the same reason.
class TiledRound {
 public:
  // How a rank's threads finish a round: copying each reduced tile out to
  // `chunk`, with streaming stores for a large message, or only waiting for
  // it.
  enum class Results { kCopy, kCopyStreaming, kLeave };

  TiledRound(SharedRegions& regions, int n, int rank, char* chunk, size_t count, DataType type, ReduceKind kind,
             Results results)
      : regions_(regions),
        n_(n),
        rank_(rank),
        chunk_(chunk),
        count_(count),
        type_(type),
        kind_(kind),
        results_(results),
        elem_(elementSize(type)),
        stamp_(regions.rounds + 1),
        tileCount_(tileElements(count, elem_, n)),
        tiles_((count + tileCount_ - 1) / tileCount_) {}

  void run(HelperPool* helpers) {
    // One tile is work for one thread: a small op wakes (or starts) no helper.
    runOnEveryThread(tiles_ > 1 ? helpers : nullptr, [this](size_t) {
      publish();
      reduce();
      collect();
    });
  }

 private:
  // A tile's claim word holds the round's stamp, then the claiming rank.
  static constexpr int kStampShift = 16;
  static constexpr uint64_t kRankBits = 0xffff;
  // Tiles of 64 KiB were 10% faster than 16 KiB at world 8 from 16 MB up on
  // the 16-core test machine; 16 KiB tiles, 1.3x faster at 256 KiB.
  static constexpr size_t kMinTileBytes = 16 * 1024;
  static constexpr size_t kMaxTileBytes = 64 * 1024;

  // About four tiles per rank, so that every thread finds work, between
  // sizes that keep a claim's cost small and the tiles many; the same on
  // every rank.
  static size_t tileElements(size_t count, size_t elem, int n) {
    const size_t bytes = count * elem;
    size_t tile = std::min(kMaxTileBytes, std::max(kMinTileBytes, bytes / (4 * static_cast<size_t>(n))));
    tile = std::max(tile, (bytes + SharedRegions::kMaxTiles - 1) / SharedRegions::kMaxTiles);
    return (tile + kSlotAlignment - 1) / kSlotAlignment * kSlotAlignment / elem;
  }

  size_t offset(size_t tile) const {
    return tile * tileCount_ * elem_;
  }
  size_t length(size_t tile) const {
    return std::min(tileCount_, count_ - tile * tileCount_);
  }
  char* slot(int rank) const {
    return slotOf(regions_, rank);
  }
  uint64_t claimMark() const {
    return stamp_ << kStampShift | static_cast<uint64_t>(rank_);
  }

  void publish() {
    for (size_t tile = nextPublish_++; tile < tiles_; tile = nextPublish_++) {
      std::memcpy(slot(rank_) + offset(tile), chunk_ + offset(tile), length(tile) * elem_);
      regions_.store(regions_.published(rank_, tile), stamp_);
    }
  }

  // Claims a tile of this round that no thread has, starting from `from`;
  // tiles_ when none is left.
  size_t claim(size_t from) {
    for (size_t tile = from; tile < tiles_; ++tile) {
      std::atomic<uint64_t>& claimer = regions_.claimed(tile);
      uint64_t seen = claimer.load(std::memory_order_relaxed);
      // A later stamp: every tile was taken and the others went on.
      while (seen >> kStampShift < stamp_) {
        if (claimer.compare_exchange_weak(seen, claimMark(), std::memory_order_relaxed)) {
          return tile;
        }
      }
    }
    return tiles_;
  }

  void reduce() {
    std::vector<const void*> inputs;
    for (size_t tile = claim(0); tile < tiles_; tile = claim(tile + 1)) {
      inputs.clear();
      // This rank's own tile too: another of its threads may be copying it.
      for (int peer = 0; peer < n_; ++peer) {
        regions_.await(
            regions_.published(peer, tile), [this](uint64_t seen) { return seen == stamp_; },
            [peer](uint64_t) { return peer; });
        if (peer > 0) {
          inputs.push_back(slot(peer) + offset(tile));
        }
      }
      // Into the first slot, in rank order: the result does not depend on
      // which rank reduced the tile.
      reduceAllInto(slot(0) + offset(tile), inputs, length(tile), type_, kind_, /*helpers=*/nullptr);
      regions_.store(regions_.reduced(tile), stamp_);
    }
  }

  void collect() {
    for (size_t tile = nextCollect_++; tile < tiles_; tile = nextCollect_++) {
      // A later round's reducer writes the word only after this rank has
      // published that round's tile, so it still holds this round's.
      regions_.await(
          regions_.reduced(tile), [this](uint64_t seen) { return seen == stamp_; },
          [this, tile](uint64_t) { return holdingUp(tile); });
      if (results_ != Results::kLeave) {
        copyBytes(
            chunk_ + offset(tile), slot(0) + offset(tile), length(tile) * elem_, results_ == Results::kCopyStreaming);
      }
    }
  }

  // The rank that `tile`'s reduction waits for: one that has not published
  // it, else the one that claimed it (every tile is claimed before any rank
  // collects; -1 should a stale claim be found all the same).
  int holdingUp(size_t tile) const {
    for (int peer = 0; peer < n_; ++peer) {
      if (regions_.published(peer, tile).load(std::memory_order_relaxed) != stamp_) {
        return peer;
      }
    }
    const uint64_t claim = regions_.claimed(tile).load(std::memory_order_relaxed);
    return claim >> kStampShift == stamp_ ? static_cast<int>(claim & kRankBits) : -1;
  }

  SharedRegions& regions_;
  const int n_;
  const int rank_;
  char* const chunk_;
  const size_t count_;
  const DataType type_;
  const ReduceKind kind_;
  const Results results_;
  const size_t elem_;
  const uint64_t stamp_;
  const size_t tileCount_; // elements per tile
  const size_t tiles_;
  std::atomic<size_t> nextPublish_{0};
  std::atomic<size_t> nextCollect_{0};
};

// The allreduce, or with `root` >= 0 the reduce to `root`, whose other
// ranks' `data` is only read.
bool sharedReduction(
    Links& links, void* data, size_t count, DataType type, ReduceKind kind, int root, const AlgorithmConfig& config) {
  const size_t elem = elementSize(type);
  SharedRegions* regions = regionsFor(links, count * elem, config);
  if (!regions) {
    return false;
  }
  const size_t perRound = slotBytes(*regions) / elem;
  TiledRound::Results results = writesResultsStreaming(count * elem) ? TiledRound::Results::kCopyStreaming
                                                                      : TiledRound::Results::kCopy;
  if (root >= 0 && links.rank() != root) {
    results = TiledRound::Results::kLeave;
  }
  // Only the allreduce reads and writes its peers' tensors: in place on
  // pooled tensors, else with cross-memory copies.
  std::vector<BufferPlaces> tensors;
  const PoolSpan mine = root < 0 ? SharedTensorPool::instance().find(data, count * elem) : PoolSpan{};
  agreeThroughSharedMemory(links, *regions, true, placesOf(data, mine, data, mine), &tensors);
  if (root < 0 &&
      (directAllreduce(links, *regions, tensors, data, count, type, kind, config) ||
       crossMemoryAllreduce(links, *regions, tensors, data, count, type, kind, config))) {
    return true;
  }
  for (size_t begin = 0; begin < count; begin += perRound, ++regions->rounds) {
    TiledRound round(
        *regions, links.size(), links.rank(), static_cast<char*>(data) + begin * elem, std::min(perRound, count - begin),
        type, kind, results);
    round.run(config.helpers);
  }
  return true;
}

} // namespace

bool sharedAllreduce(Links& links, void* data, size_t count, DataType type, ReduceKind kind, const AlgorithmConfig& config) {
  return sharedReduction(links, data, count, type, kind, /*root=*/-1, config);
}

bool sharedReduce(
    Links& links, void* data, size_t count, DataType type, ReduceKind kind, int root, const AlgorithmConfig& config) {
  return sharedReduction(links, data, count, type, kind, root, config);
}

} // namespace monarch
