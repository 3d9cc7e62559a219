// Gather, scatter and alltoall through shared memory (shared_memory.h), in
// one round: each rank writes what it sends into its own slot, the ranks
// agree on the op (shared_signature.h), and each reads what it receives out
// of its peers' slots. Over the links a rank waits for a wake-up of its
// event loop and its worker per message; here it waits for nothing but the
// stamps, so these carry the small messages that latency bounds.
//
// A rank writes its slot before agreeing: it writes that half again only two
// rounds later, and it finished the round between only after every peer had
// agreed on it, which each did only after finishing the round before.
// Neither side waits for the readers: the next op's stamps do (the stamp a
// rank replaces must have been read), and so does the next round of the
// same half.

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

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
  if (!regions || bytes > slotBytes(*regions)) {
    return false;
  }
  if (r != root) {
    std::memcpy(slotOf(*regions, r), in, bytes);
  }
  agreeThroughSharedMemory(links, *regions);
  if (r == root) {
    std::vector<CopySpan> spans;
    for (int peer = 0; peer < n; ++peer) {
      if (peer != r) {
        spans.push_back({outs[peer], slotOf(*regions, peer), bytes});
      } else if (outs[r] != in) {
        spans.push_back({outs[r], in, bytes});
      }
    }
    copySpans(spans, config.helpers);
  }
  ++regions->rounds;
  return true;
}

bool sharedScatter(
    Links& links, const std::vector<const void*>& ins, void* out, size_t bytes, int root, const AlgorithmConfig& config) {
  const int n = links.size();
  const int r = links.rank();
  SharedRegions* regions = regionsFor(links, bytes * n, config);
  if (!regions || bytes * n > slotBytes(*regions)) {
    return false;
  }
  char* rootSlot = slotOf(*regions, root);
  if (r == root) {
    std::vector<CopySpan> spans;
    for (int peer = 0; peer < n; ++peer) {
      if (peer != r) {
        spans.push_back({rootSlot + peer * bytes, ins[peer], bytes});
      } else if (ins[r] != out) {
        spans.push_back({out, ins[r], bytes});
      }
    }
    copySpans(spans, config.helpers);
  }
  agreeThroughSharedMemory(links, *regions);
  if (r != root) {
    std::memcpy(out, rootSlot + r * bytes, bytes);
  }
  ++regions->rounds;
  return true;
}

namespace {

// What an alltoall's slot starts with: where the block for each rank lies
// in the rest of the slot, and how long it is.
struct BlockEntry {
  uint64_t offset;
  uint64_t bytes;
};

} // namespace

bool sharedAlltoall(
    Links& links, const void* in, const Partition& sendBlocks, void* out, const Partition& recvBlocks,
    const AlgorithmConfig& config) {
  const int n = links.size();
  const int r = links.rank();
  // Each rank may send a different amount, so whether this rank's blocks
  // fit its slot is its own answer: the ranks take this path only if every
  // one's does, which they learn as they agree on the op.
  SharedRegions* regions = links.sharedRegions();
  if (!regions) {
    return false;
  }
  const size_t headerBytes = (n * sizeof(BlockEntry) + kSlotAlignment - 1) / kSlotAlignment * kSlotAlignment;
  size_t sending = 0;
  size_t receiving = 0;
  for (int peer = 0; peer < n; ++peer) {
    sending += sendBlocks.counts[peer];
    receiving += recvBlocks.counts[peer];
  }
  const bool fits = std::max(sending, receiving) >= config.shmMinBytes && headerBytes + sending <= slotBytes(*regions);
  char* mine = slotOf(*regions, r);
  const auto* source = static_cast<const char*>(in);
  if (fits) {
    auto* entries = reinterpret_cast<BlockEntry*>(mine);
    std::vector<CopySpan> spans;
    size_t at = headerBytes;
    for (int peer = 0; peer < n; ++peer) {
      const size_t length = peer == r ? 0 : sendBlocks.counts[peer];
      entries[peer] = {at, length};
      spans.push_back({mine + at, source + sendBlocks.offsets[peer], length});
      at += length;
    }
    copySpans(spans, config.helpers);
  }
  if (!agreeThroughSharedMemory(links, *regions, fits)) {
    return false;
  }
  auto* dest = static_cast<char*>(out);
  std::vector<CopySpan> spans;
  for (int peer = 0; peer < n; ++peer) {
    if (peer == r) {
      spans.push_back({dest + recvBlocks.offsets[r], source + sendBlocks.offsets[r], recvBlocks.counts[r]});
      continue;
    }
    const char* theirs = slotOf(*regions, peer);
    const BlockEntry entry = reinterpret_cast<const BlockEntry*>(theirs)[r];
    if (entry.bytes != recvBlocks.counts[peer]) {
      links.failMismatch(
          peer, "sent " + std::to_string(entry.bytes) + " bytes where this rank expected " +
              std::to_string(recvBlocks.counts[peer]));
    }
    spans.push_back({dest + recvBlocks.offsets[peer], theirs + entry.offset, entry.bytes});
  }
  copySpans(spans, config.helpers);
  ++regions->rounds;
  return true;
}

} // namespace monarch
