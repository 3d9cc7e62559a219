// Every algorithm here runs in rounds. In a round each rank writes its part
// into its own region, all ranks meet at a barrier, then each reads what it
// needs from the peers' regions. A round uses one half of every region and
// the next round the other half: a rank writes half h again two rounds
// later, after the barrier of the round between, which no rank passes
// before it has finished reading the previous round. One barrier per round
// is therefore enough, and SharedRegions::rounds carries the alternation
// from one op to the next.
//
// An op's first barrier goes over the links: its frames carry the op's
// signature, so ranks that called different ops fail with a mismatch, as
// they would on the links. The op's later barriers meet in shared memory,
// which costs microseconds instead of a message round trip per round. (The
// allreduce, in shared_allreduce.cc, waits tile by tile instead.)

#include "algorithms/shared_memory.h"

#include <algorithm>

#include "algorithms/parallel.h"
#include "algorithms/reduce_kernels.h"
#include "algorithms/shared_slots.h"

namespace monarch {

namespace {

// The barriers of one op: the first over the links, the rest in memory.
class OpBarrier {
 public:
  OpBarrier(Links& links, SharedRegions& regions) : links_(links), regions_(regions) {}
  void operator()() {
    if (first_) {
      first_ = false;
      barrier(links_);
    } else {
      regions_.barrier();
    }
  }

 private:
  Links& links_;
  SharedRegions& regions_;
  bool first_ = true;
};

// Byte `offset` of every peer's slot, in rank order: the order in which a
// rank reduces what the peers published.
std::vector<const void*> peerSlotsAt(const SharedRegions& regions, int n, int rank, size_t offset) {
  std::vector<const void*> slots;
  for (int peer = 0; peer < n; ++peer) {
    if (peer != rank) {
      slots.push_back(slotOf(regions, peer) + offset);
    }
  }
  return slots;
}

// Elements [begin, begin + piece) of a block of `count`, clipped.
size_t pieceLength(size_t count, size_t begin, size_t piece) {
  return begin >= count ? 0 : std::min(piece, count - begin);
}

} // namespace

bool sharedReduceScatter(
    Links& links, void* data, const Partition& blocks, DataType type, ReduceKind kind, const AlgorithmConfig& config) {
  const size_t elem = elementSize(type);
  const int n = links.size();
  const int r = links.rank();
  SharedRegions* regions = regionsFor(links, blocks.maxCount() * elem * n, config);
  if (!regions) {
    return false;
  }
  // Each round moves `piece` elements of every block; rank p's share of a
  // slot is the piece of block p.
  const size_t piece = slotBytes(*regions) / elem / n;
  if (piece == 0) {
    return false; // more ranks than a slot has elements (a tiny Options.shm_segment_bytes)
  }
  auto* bytes = static_cast<char*>(data);
  OpBarrier sync(links, *regions);
  for (size_t begin = 0; begin < blocks.maxCount(); begin += piece, ++regions->rounds) {
    char* mine = slotOf(*regions, r);
    std::vector<CopySpan> pieces;
    for (int block = 0; block < n; ++block) {
      size_t length = pieceLength(blocks.counts[block], begin, piece);
      pieces.push_back({mine + block * piece * elem, bytes + (blocks.offsets[block] + begin) * elem, length * elem});
    }
    copySpans(pieces, config.helpers);
    sync();
    size_t length = pieceLength(blocks.counts[r], begin, piece);
    reduceAllInto(
        bytes + (blocks.offsets[r] + begin) * elem, peerSlotsAt(*regions, n, r, r * piece * elem), length, type, kind,
        config.helpers);
  }
  return true;
}

bool sharedAllgather(Links& links, void* data, const Partition& blocks, size_t elementBytes, const AlgorithmConfig& config) {
  const int n = links.size();
  const int r = links.rank();
  SharedRegions* regions = regionsFor(links, blocks.maxCount() * elementBytes * n, config);
  if (!regions) {
    return false;
  }
  const size_t piece = slotBytes(*regions) / elementBytes;
  auto* bytes = static_cast<char*>(data);
  OpBarrier sync(links, *regions);
  for (size_t begin = 0; begin < blocks.maxCount(); begin += piece, ++regions->rounds) {
    size_t length = pieceLength(blocks.counts[r], begin, piece);
    copySpans({{slotOf(*regions, r), bytes + (blocks.offsets[r] + begin) * elementBytes, length * elementBytes}},
              config.helpers);
    sync();
    std::vector<CopySpan> pieces;
    for (int peer = 0; peer < n; ++peer) {
      if (peer != r) {
        length = pieceLength(blocks.counts[peer], begin, piece);
        pieces.push_back({bytes + (blocks.offsets[peer] + begin) * elementBytes, slotOf(*regions, peer), length * elementBytes});
      }
    }
    copySpans(pieces, config.helpers);
  }
  return true;
}

bool sharedBroadcast(Links& links, void* data, size_t bytes, int root, const AlgorithmConfig& config) {
  SharedRegions* regions = regionsFor(links, bytes, config);
  if (!regions) {
    return false;
  }
  const size_t piece = slotBytes(*regions);
  auto* buffer = static_cast<char*>(data);
  OpBarrier sync(links, *regions);
  for (size_t begin = 0; begin < bytes; begin += piece, ++regions->rounds) {
    size_t length = std::min(piece, bytes - begin);
    if (links.rank() == root) {
      copySpans({{slotOf(*regions, root), buffer + begin, length}}, config.helpers);
    }
    sync();
    if (links.rank() != root) {
      copySpans({{buffer + begin, slotOf(*regions, root), length}}, config.helpers);
    }
  }
  return true;
}

} // namespace monarch
