// Gather, scatter and alltoall through shared memory (shared_memory.h). Each
// rank writes what it sends into its own slot, the ranks meet, and each reads
// what it receives out of its peers' slots. Over the links a rank waits for a
// wake-up of its event loop and its worker per message, and a large message
// is one remote read on the receiver's event-loop thread (a gather's root
// read its peers' blocks one after the other, at a few GB/s); here every copy
// is split among the group's threads.
//
// Gather goes in rounds as the broadcast does (shared_memory.cc), and so
// does scatter in a group of two (larger groups scatter in one round or over
// the links): in a round the senders write a piece of each block they send,
// all ranks meet (shared_signature.h: in the first round as they agree on
// the op, later at a barrier), then the receivers copy their pieces out. A sender
// writes half h of its region again two rounds later, after the meeting of
// the round between, which no receiver passes before it has read the round
// before. The alltoall goes in rounds too, each rank both a sender and a
// receiver; its blocks may differ in size from rank to rank, so the ranks
// learn the round count from the block sizes each writes in its first round.
//
// A rank writes its slot before agreeing: it writes that half again only two
// rounds later, and it finished the round between only after every peer had
// agreed on it, which each did only after finishing the round before.
// Neither side waits for the readers of the last round: the next op's stamps
// do (the stamp a rank replaces must have been read), and so does the next
// round of the same half.

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "algorithms/chunks.h"
#include "algorithms/parallel.h"
#include "algorithms/shared_memory.h"
#include "algorithms/shared_signature.h"
#include "algorithms/shared_slots.h"

namespace monarch {

bool sharedGather(
    Links& links, const void* in, const std::vector<void*>& outs, size_t bytes, int root, const AlgorithmConfig& config) {
  const int n = links.size();
  const int r = links.rank();
  SharedRegions* regions = regionsFor(links, bytes * n, config);
  if (!regions) {
    return false;
  }
  // A sender's whole slot carries a piece of its block per round.
  const size_t piece = slotBytes(*regions);
  const auto* source = static_cast<const char*>(in);
  size_t begin = 0;
  do {
    const size_t length = std::min(piece, bytes - begin);
    if (r != root) {
      copySpans({{slotOf(*regions, r), source + begin, length}}, config.helpers);
    }
    meetForRound(links, *regions, begin == 0);
    if (r == root) {
      std::vector<CopySpan> spans;
      for (int peer = 0; peer < n; ++peer) {
        if (peer != r) {
          spans.push_back({static_cast<char*>(outs[peer]) + begin, slotOf(*regions, peer), length});
        } else if (begin == 0 && outs[r] != in) {
          spans.push_back({outs[r], in, bytes});
        }
      }
      copySpans(spans, config.helpers);
    }
    begin += length;
    ++regions->rounds;
  } while (begin < bytes);
  return true;
}

bool sharedScatter(
    Links& links, const std::vector<const void*>& ins, void* out, size_t bytes, int root, const AlgorithmConfig& config) {
  const int n = links.size();
  const int r = links.rank();
  SharedRegions* regions = regionsFor(links, bytes * n, config);
  if (!regions) {
    return false;
  }
  // The root's slot carries a piece of each peer's block per round, in rank
  // order without the root's own.
  const size_t piece = piecePerPeer(slotBytes(*regions), n);
  if (piece == 0) {
    return false; // more ranks than a slot has room for (a tiny Options.shm_segment_bytes)
  }
  // Past one round, a group of more than two scatters over the links: each
  // receiver reads its block out of the root's memory, all at once, where
  // rounds have the root copy every block. On the 16-core test machine at
  // 16-256 MB, rounds were 1.2-3.8x faster at world 2, 0.86-1.16x at 4,
  // 2-2.6x slower at 8 (benchmarks/RESULTS.md).
  if (n > 2 && bytes > piece) {
    return false;
  }
  auto* dest = static_cast<char*>(out);
  size_t begin = 0;
  do {
    const size_t length = std::min(piece, bytes - begin);
    char* rootSlot = slotOf(*regions, root);
    if (r == root) {
      std::vector<CopySpan> spans;
      for (int peer = 0; peer < n; ++peer) {
        if (peer != r) {
          const char* from = static_cast<const char*>(ins[peer]) + begin;
          spans.push_back({rootSlot + placeInSlot(peer, root) * piece, from, length});
        } else if (begin == 0 && ins[r] != out) {
          spans.push_back({out, ins[r], bytes});
        }
      }
      copySpans(spans, config.helpers);
    }
    meetForRound(links, *regions, begin == 0);
    if (r != root) {
      copySpans({{dest + begin, rootSlot + placeInSlot(r, root) * piece, length}}, config.helpers);
    }
    begin += length;
    ++regions->rounds;
  } while (begin < bytes);
  return true;
}

namespace {

// What an alltoall's slot starts with in its first round: how long the
// block its owner sends each rank is.
struct BlockEntry {
  uint64_t bytes;
};

} // namespace

bool sharedAlltoall(
    Links& links, const void* in, const Partition& sendBlocks, void* out, const Partition& recvBlocks,
    const AlgorithmConfig& config) {
  const int n = links.size();
  const int r = links.rank();
  SharedRegions* regions = links.sharedRegions();
  if (!regions) {
    return false;
  }
  const size_t headerBytes = (n * sizeof(BlockEntry) + kSlotAlignment - 1) / kSlotAlignment * kSlotAlignment;
  // A rank's slot carries, per round, a piece of the block for each peer in
  // rank order without its own, after the header.
  const size_t piece = slotBytes(*regions) < headerBytes ? 0 : piecePerPeer(slotBytes(*regions) - headerBytes, n);
  size_t sending = 0;
  size_t receiving = 0;
  for (int peer = 0; peer < n; ++peer) {
    sending += sendBlocks.counts[peer];
    receiving += recvBlocks.counts[peer];
  }
  // Each rank may send a different amount, so whether this op is large
  // enough for shared memory is each rank's own answer: the ranks take this
  // path only if every one's is yes, which they learn as they agree.
  const bool fits = std::max(sending, receiving) >= config.shmMinBytes && piece > 0;
  const auto* source = static_cast<const char*>(in);
  auto* dest = static_cast<char*>(out);
  // The round count follows from the largest block of any rank, which every
  // rank reads out of the headers after the first meeting.
  size_t rounds = 1;
  for (size_t round = 0; round < rounds; ++round, ++regions->rounds) {
    const size_t begin = round * piece;
    if (fits) {
      char* mine = slotOf(*regions, r);
      if (round == 0) {
        auto* entries = reinterpret_cast<BlockEntry*>(mine);
        for (int peer = 0; peer < n; ++peer) {
          entries[peer] = {peer == r ? 0 : sendBlocks.counts[peer]};
        }
      }
      std::vector<CopySpan> spans;
      for (int peer = 0; peer < n; ++peer) {
        if (peer != r) {
          spans.push_back(
              {mine + headerBytes + placeInSlot(peer, r) * piece, source + sendBlocks.offsets[peer] + begin,
               clipped(sendBlocks.counts[peer], begin, piece)});
        }
      }
      copySpans(spans, config.helpers);
    }
    if (round > 0) {
      regions->barrier();
    } else if (!agreeThroughSharedMemory(links, *regions, fits)) {
      return false;
    } else {
      size_t largest = 0;
      for (int owner = 0; owner < n; ++owner) {
        const auto* entries = reinterpret_cast<const BlockEntry*>(slotOf(*regions, owner));
        for (int peer = 0; peer < n; ++peer) {
          largest = std::max<size_t>(largest, entries[peer].bytes);
        }
        if (owner != r && entries[r].bytes != recvBlocks.counts[owner]) {
          links.failMismatch(
              owner, "sent " + std::to_string(entries[r].bytes) + " bytes where this rank expected " +
                  std::to_string(recvBlocks.counts[owner]));
        }
      }
      rounds = std::max<size_t>(1, (largest + piece - 1) / piece);
    }
    std::vector<CopySpan> spans;
    if (round == 0) {
      spans.push_back({dest + recvBlocks.offsets[r], source + sendBlocks.offsets[r], recvBlocks.counts[r]});
    }
    for (int peer = 0; peer < n; ++peer) {
      if (peer != r) {
        spans.push_back(
            {dest + recvBlocks.offsets[peer] + begin, slotOf(*regions, peer) + headerBytes + placeInSlot(r, peer) * piece,
             clipped(recvBlocks.counts[peer], begin, piece)});
      }
    }
    copySpans(spans, config.helpers);
  }
  return true;
}

} // namespace monarch
