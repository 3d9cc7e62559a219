// Reduce-scatter and allgather through shared memory (shared_memory.h), in
// rounds of one slot per rank like the other shared-memory collectives, and
// like the allreduce with no barrier inside a round: each rank publishes a
// round tile by tile and marks every tile, and its peers take each tile as
// soon as it is marked. Each rank moves the fewest bytes a copy through
// shared memory allows (benchmarks/RESULTS.md, "memory model"): the
// reduce-scatter publishes the peers' blocks and reads its own input block
// and the peers' copies of it once, writing the result straight to the
// output; the allgather publishes its block from its input, writing it to
// its output in the same pass, and copies each peer's once. Both write
// their results with streaming stores where the message is too large for
// the cache (shared_slots.h).
//
// A rank writes its half of the slots again two rounds later. By then it
// has taken every tile of the round between, each published by its owner
// only after that owner had finished the round before: no rank still reads
// the half.

#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>
#include <vector>

#include "algorithms/chunks.h"
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

// Tiles of at least this many bytes per block, and at most
// SharedRegions::kMaxTiles per round.
constexpr size_t kMinTileBytes = 16 * 1024;
// From kLargeMessageBytes, tiles of at least kLargeTileBytes per block: at
// 16 and 64 MB they were faster than 16 KiB in most A/B runs on the 16-core
// test machine (up to 1.4x at one thread per rank, worlds 2-8); at 1 MB
// with 8 threads per rank they left most threads without a tile (1.5x
// slower).
constexpr size_t kLargeMessageBytes = 16 * 1024 * 1024;
constexpr size_t kLargeTileBytes = 256 * 1024;
// But at least this many tiles a round: a reduce-scatter's round at world 8
// carries 585 KiB of each block (a 4 MiB slot shared by seven peers), which
// 256 KiB tiles cut in three, one or two for each copying thread, leaving
// none to take until the round was all but published. Four were 1.07-1.27x
// faster at 16 and 64 MB on the 16-core test machine, one and two threads
// per rank (256 MB: 1.15x and 0.85x; benchmarks/RESULTS.md, "at least four
// tiles a round").
constexpr size_t kMinTilesPerRound = 4;

// Elements per tile for a round that moves `piece` elements of each block
// of a message of `messageBytes` (all blocks); the same on every rank.
size_t tileElements(size_t piece, size_t elem, size_t messageBytes) {
  const size_t large = std::max(kMinTileBytes, std::min(kLargeTileBytes, piece * elem / kMinTilesPerRound));
  const size_t least = messageBytes >= kLargeMessageBytes ? large : kMinTileBytes;
  const size_t bytes = std::max(least, (piece * elem + SharedRegions::kMaxTiles - 1) / SharedRegions::kMaxTiles);
  return (bytes + kSlotAlignment - 1) / kSlotAlignment * kSlotAlignment / elem;
}

// Where the whole of a buffer laid out by `blocks` lies in this rank's pool.
PoolSpan poolSpanOf(const void* data, const Partition& blocks, size_t elementBytes) {
  return SharedTensorPool::instance().find(data, (blocks.offsets.back() + blocks.counts.back()) * elementBytes);
}

// One round: the rank's threads publish its tiles (publish(tile)), marking
// each, and take tiles (take(tile)) once every peer has marked them. A
// thread takes tiles about kLagBytes behind the ones it publishes, all that
// are left once every tile is published: a tile is taken while the peers'
// copies of it are still in the cache, where publishing the whole round
// first left n ranks' slots to be read back from memory once they
// outgrew the cache. Publishing never waits, so every tile is published
// and every take returns.
class TileExchange {
 public:
  // `tileBytes`: what this rank publishes per tile.
  TileExchange(SharedRegions& regions, int n, int rank, size_t tiles, size_t tileBytes)
      : regions_(regions),
        n_(n),
        rank_(rank),
        tiles_(tiles),
        lag_(std::max<size_t>(2, kLagBytes / tileBytes)),
        stamp_(regions.rounds + 1) {}

  void run(HelperPool* helpers, const std::function<void(size_t)>& publish, const std::function<void(size_t)>& take) {
    // One tile is work for one thread: a small op wakes (or starts) no helper.
    runOnEveryThread(tiles_ > 1 ? helpers : nullptr, [&](size_t) {
      while (true) {
        const size_t mine = nextPublish_++;
        if (mine < tiles_) {
          publish(mine);
          regions_.store(regions_.published(rank_, mine), stamp_);
        }
        const size_t upTo = mine >= tiles_ ? tiles_ : (mine + 1 > lag_ ? mine + 1 - lag_ : 0);
        for (size_t tile = nextTake_.load(); tile < upTo;) {
          if (nextTake_.compare_exchange_weak(tile, tile + 1)) {
            awaitPeers(tile);
            take(tile);
            tile = nextTake_.load();
          }
        }
        if (mine >= tiles_) {
          return;
        }
      }
    });
  }

 private:
  // Bytes published ahead of the tiles taken: slack for a peer a little
  // behind, few enough that n ranks' tiles in between stay in the cache.
  static constexpr size_t kLagBytes = 1024 * 1024;

  void awaitPeers(size_t tile) {
    for (int peer = 0; peer < n_; ++peer) {
      if (peer != rank_) {
        // A later stamp: the peer has gone on to the next round, which
        // it starts only once it has published all of this one.
        regions_.await(
            regions_.published(peer, tile), [this](uint64_t seen) { return seen >= stamp_; },
            [peer](uint64_t) { return peer; });
      }
    }
  }

  SharedRegions& regions_;
  const int n_;
  const int rank_;
  const size_t tiles_;
  const size_t lag_; // tiles
  const uint64_t stamp_;
  std::atomic<size_t> nextPublish_{0};
  std::atomic<size_t> nextTake_{0};
};

} // namespace

bool sharedReduceScatter(
    Links& links, const void* in, void* out, const Partition& blocks, DataType type, ReduceKind kind,
    const AlgorithmConfig& config) {
  const size_t elem = elementSize(type);
  const int n = links.size();
  const int r = links.rank();
  const size_t messageBytes = blocks.maxCount() * elem * n;
  SharedRegions* regions = regionsFor(links, messageBytes, config);
  if (!regions) {
    return false;
  }
  // A rank's slot holds, per round, a piece of each peer's block, in rank
  // order without its own.
  const size_t pieceBytes = piecePerPeer(slotBytes(*regions), n);
  const size_t piece = pieceBytes / elem;
  if (piece == 0) {
    return false; // more ranks than a slot has room for (a tiny Options.shm_segment_bytes)
  }
  std::vector<BufferPlaces> places;
  agreeThroughSharedMemory(links, *regions, true, placesOf(in, poolSpanOf(in, blocks, elem), out, {}), &places);
  if (directReduceScatter(links, *regions, places, in, out, blocks, type, kind, config) ||
      crossMemoryReduceScatter(links, *regions, places, in, out, blocks, type, kind, config)) {
    return true;
  }
  const auto* source = static_cast<const char*>(in);
  auto* result = static_cast<char*>(out);
  const size_t tile = tileElements(piece, elem, messageBytes);
  const bool streaming = writesResultsStreaming(messageBytes);
  for (size_t begin = 0; begin < blocks.maxCount(); begin += piece, ++regions->rounds) {
    const size_t length = std::min(piece, blocks.maxCount() - begin);
    auto publish = [&](size_t t) {
      char* mine = slotOf(*regions, r);
      for (int block = 0; block < n; ++block) {
        const size_t at = begin + t * tile;
        const size_t count = clipped(blocks.counts[block], at, std::min(tile, begin + length - at));
        if (block != r && count > 0) {
          std::memcpy(
              mine + placeInSlot(block, r) * pieceBytes + t * tile * elem, source + (blocks.offsets[block] + at) * elem,
              count * elem);
        }
      }
    };
    auto take = [&](size_t t) {
      const size_t at = begin + t * tile;
      const size_t count = clipped(blocks.counts[r], at, std::min(tile, begin + length - at));
      if (count == 0) {
        return;
      }
      // The peers' copies in rank order: the result does not depend on
      // which peer was first.
      std::vector<const void*> peers;
      for (int peer = 0; peer < n; ++peer) {
        if (peer != r) {
          peers.push_back(slotOf(*regions, peer) + placeInSlot(r, peer) * pieceBytes + t * tile * elem);
        }
      }
      reduceAllFrom(result + at * elem, source + (blocks.offsets[r] + at) * elem, peers, count, type, kind, streaming);
    };
    TileExchange(*regions, n, r, (length + tile - 1) / tile, (n - 1) * tile * elem).run(config.helpers, publish, take);
  }
  return true;
}

bool sharedAllgather(
    Links& links, const void* in, void* out, const Partition& blocks, size_t elementBytes, const AlgorithmConfig& config) {
  const int n = links.size();
  const int r = links.rank();
  const size_t messageBytes = blocks.maxCount() * elementBytes * n;
  SharedRegions* regions = regionsFor(links, messageBytes, config);
  if (!regions) {
    return false;
  }
  // The peers write this rank's output where `out` has it, or read its
  // block where `in` has it.
  const SharedTensorPool& pool = SharedTensorPool::instance();
  std::vector<BufferPlaces> places;
  agreeThroughSharedMemory(
      links, *regions, true,
      placesOf(in, pool.find(in, blocks.counts[r] * elementBytes), out, poolSpanOf(out, blocks, elementBytes)), &places);
  if (directAllgather(links, *regions, places, in, out, blocks, elementBytes, config) ||
      crossMemoryAllgather(links, *regions, places, in, out, blocks, elementBytes, config)) {
    return true;
  }
  const size_t piece = slotBytes(*regions) / elementBytes;
  const size_t tile = tileElements(piece, elementBytes, messageBytes);
  const auto* source = static_cast<const char*>(in);
  auto* bytes = static_cast<char*>(out);
  char* own = bytes + blocks.offsets[r] * elementBytes;
  const bool streaming = writesResultsStreaming(messageBytes);
  for (size_t begin = 0; begin < blocks.maxCount(); begin += piece, ++regions->rounds) {
    const size_t length = std::min(piece, blocks.maxCount() - begin);
    auto span = [&](int owner, size_t t) {
      const size_t at = begin + t * tile;
      return clipped(blocks.counts[owner], at, std::min(tile, begin + length - at)) * elementBytes;
    };
    auto publish = [&](size_t t) {
      const size_t at = (begin + t * tile) * elementBytes;
      std::memcpy(slotOf(*regions, r) + t * tile * elementBytes, source + at, span(r, t));
      if (own != source) {
        copyBytes(own + at, source + at, span(r, t), streaming); // the tile is still in the cache
      }
    };
    auto take = [&](size_t t) {
      for (int distance = 1; distance < n; ++distance) {
        const int peer = (r + distance) % n;
        copyBytes(
            bytes + (blocks.offsets[peer] + begin + t * tile) * elementBytes,
            slotOf(*regions, peer) + t * tile * elementBytes, span(peer, t), streaming);
      }
    };
    TileExchange(*regions, n, r, (length + tile - 1) / tile, tile * elementBytes).run(config.helpers, publish, take);
  }
  return true;
}

} // namespace monarch
