// Direct (all-pairs) reduce-scatter and allgather: every rank sends each peer
// that peer's block and receives its own from every peer, all at once. The
// bytes moved are the ring's, but there is one dependent step instead of n-1,
// so no chunk waits for a neighbour to pass it on. On one host, where a
// transfer is a single remote read, the ring's hand-offs cost more than the
// copies themselves (benchmarks/collectives.py, README).

#include <vector>

#include "algorithms/block_exchange.h"
#include "algorithms/chunks.h"
#include "algorithms/reduce_kernels.h"

namespace monarch {

namespace {

// Staging for incoming chunks is bounded: receives are posted a window of
// chunks per peer ahead of the reduction, double-buffered.
constexpr size_t kChunksPerWindow = 4;
// Large blocks move in at most this many chunks each: every chunk costs a
// descriptor, a read and an acknowledgement, and with nothing to pipeline
// across steps, bigger chunks win once there are enough to overlap reading
// with reducing (measured on 16 cores, README).
constexpr size_t kChunksPerBlock = 8;

// Chunk length in elements; the same on every rank (from the largest block).
size_t directChunk(const Partition& blocks, size_t elementBytes, const AlgorithmConfig& config) {
  const size_t configured = chunkElements(config.chunkBytes, elementBytes);
  return std::max(configured, (blocks.maxCount() + kChunksPerBlock - 1) / kChunksPerBlock);
}

// The peer this rank receives from at distance k (1..n-1) and the one it sends to.
int sourceAt(int rank, int k, int n) {
  return wrapRank(rank - k, n);
}
int targetAt(int rank, int k, int n) {
  return wrapRank(rank + k, n);
}

} // namespace

void directReduceScatter(Links& links, void* data, const Partition& blocks, DataType type, ReduceKind kind, const AlgorithmConfig& config) {
  const int n = links.size();
  const int r = links.rank();
  const size_t elem = elementSize(type);
  const size_t chunk = directChunk(blocks, elem, config);
  const size_t window = chunk * kChunksPerWindow;
  auto* bytes = static_cast<char*>(data);
  const size_t base = blocks.offsets[r];
  const size_t mine = blocks.counts[r];
  const size_t slotBytes = std::min(window, mine) * elem;
  char* scratch = static_cast<char*>(links.workspace(2 * (n - 1) * slotBytes, Links::Workspace::kAlgorithm));
  auto slot = [&](size_t windowIndex, int k) { return scratch + ((windowIndex % 2) * (n - 1) + (k - 1)) * slotBytes; };

  // receives[k-1] holds this window's chunks from the peer at distance k.
  auto postWindow = [&](size_t windowIndex) {
    std::vector<std::vector<Links::Handle>> receives(n - 1);
    const size_t start = windowIndex * window;
    for (int k = 1; k < n; ++k) {
      char* into = slot(windowIndex, k);
      forEachChunk(start, std::min(window, mine - start), chunk, [&](size_t off, size_t cnt) {
        receives[k - 1].push_back(links.recv(sourceAt(r, k, n), into + (off - start) * elem, cnt * elem));
      });
    }
    return receives;
  };

  const size_t windows = (mine + window - 1) / window;
  std::vector<std::vector<Links::Handle>> receives;
  if (windows > 0) {
    receives = postWindow(0);
  }
  for (int k = 1; k < n; ++k) {
    const int target = targetAt(r, k, n);
    forEachChunk(blocks.offsets[target], blocks.counts[target], chunk, [&](size_t off, size_t cnt) {
      links.send(target, bytes + off * elem, cnt * elem);
    });
  }
  for (size_t w = 0; w < windows; ++w) {
    auto next = w + 1 < windows ? postWindow(w + 1) : std::vector<std::vector<Links::Handle>>();
    const size_t start = w * window;
    size_t index = 0;
    forEachChunk(start, std::min(window, mine - start), chunk, [&](size_t off, size_t cnt) {
      // Every peer's copy of this chunk while it is still in cache, peers in
      // a fixed order, so that the result does not depend on arrival order.
      for (int k = 1; k < n; ++k) {
        links.wait(receives[k - 1][index]);
        reduceInto(bytes + (base + off) * elem, slot(w, k) + (off - start) * elem, cnt, type, kind, config.helpers);
      }
      ++index;
    });
    receives.swap(next);
  }
  // Peers have read every block sent from `data` before the caller reuses it.
  links.waitAll();
}

void directAllgather(Links& links, void* data, const Partition& blocks, size_t elementBytes, const AlgorithmConfig& config) {
  const int n = links.size();
  const int r = links.rank();
  const size_t chunk = directChunk(blocks, elementBytes, config);
  auto* bytes = static_cast<char*>(data);
  for (int k = 1; k < n; ++k) {
    const int source = sourceAt(r, k, n);
    forEachChunk(blocks.offsets[source], blocks.counts[source], chunk, [&](size_t off, size_t cnt) {
      links.recv(source, bytes + off * elementBytes, cnt * elementBytes);
    });
  }
  for (int k = 1; k < n; ++k) {
    const int target = targetAt(r, k, n);
    forEachChunk(blocks.offsets[r], blocks.counts[r], chunk, [&](size_t off, size_t cnt) {
      links.send(target, bytes + off * elementBytes, cnt * elementBytes);
    });
  }
  links.waitAll();
}

} // namespace monarch
