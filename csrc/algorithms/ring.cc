// Ring reduce-scatter and allgather, pipelined in chunks: a chunk is passed
// on to the right neighbour as soon as it has been received (and reduced),
// so sending, receiving and reducing overlap.

#include <vector>

#include "algorithms/chunks.h"
#include "algorithms/block_exchange.h"
#include "algorithms/reduce_kernels.h"

namespace monarch {

void ringReduceScatter(Links& links, void* data, const Partition& blocks, DataType type, ReduceKind kind, const AlgorithmConfig& config) {
  const int n = links.size();
  const int r = links.rank();
  const size_t elem = elementSize(type);
  const size_t chunk = chunkElements(config.chunkBytes, elem);
  auto* bytes = static_cast<char*>(data);
  const int right = wrapRank(r + 1, n);
  const int left = wrapRank(r - 1, n);
  // Step s sends block r-s-1 and receives block r-s-2; the last step
  // receives block r, which is then complete.
  auto blockAt = [&](int step) { return wrapRank(r - step - 1, n); };
  // Two scratch blocks: the next step's receives are posted before this
  // step's chunks are reduced, so chunks that arrive early land in place
  // instead of being buffered by the transport.
  const size_t blockBytes = blocks.maxCount() * elem;
  char* scratch = static_cast<char*>(links.workspace(2 * blockBytes, Links::Workspace::kAlgorithm));
  auto postReceives = [&](int step) {
    int incoming = blockAt(step + 1);
    size_t base = blocks.offsets[incoming];
    char* into = scratch + (step % 2) * blockBytes;
    std::vector<Links::Handle> recvs;
    forEachChunk(base, blocks.counts[incoming], chunk, [&](size_t off, size_t cnt) {
      recvs.push_back(links.recv(left, into + (off - base) * elem, cnt * elem));
    });
    return recvs;
  };

  int first = blockAt(0);
  std::vector<Links::Handle> recvs = postReceives(0);
  forEachChunk(blocks.offsets[first], blocks.counts[first], chunk, [&](size_t off, size_t cnt) {
    links.send(right, bytes + off * elem, cnt * elem);
  });
  for (int step = 0; step < n - 1; ++step) {
    std::vector<Links::Handle> next;
    if (step + 1 < n - 1) {
      next = postReceives(step + 1);
    }
    int incoming = blockAt(step + 1);
    size_t base = blocks.offsets[incoming];
    const char* from = scratch + (step % 2) * blockBytes;
    size_t index = 0;
    forEachChunk(base, blocks.counts[incoming], chunk, [&](size_t off, size_t cnt) {
      links.wait(recvs[index++]);
      reduceInto(bytes + off * elem, from + (off - base) * elem, cnt, type, kind, config.helpers);
      if (step + 1 < n - 1) {
        links.send(right, bytes + off * elem, cnt * elem);
      }
    });
    recvs.swap(next);
  }
  links.waitAll();
}

void ringAllgather(Links& links, void* data, const Partition& blocks, size_t elementBytes, const AlgorithmConfig& config) {
  const int n = links.size();
  const int r = links.rank();
  const size_t elem = elementBytes;
  const size_t chunk = chunkElements(config.chunkBytes, elem);
  auto* bytes = static_cast<char*>(data);
  const int right = wrapRank(r + 1, n);
  const int left = wrapRank(r - 1, n);
  // Step s receives block r-s-1 and forwards it at step s+1. Every block
  // lands in its own place, so all receives are posted up front.
  std::vector<std::vector<Links::Handle>> recvs(n - 1);
  for (int step = 0; step < n - 1; ++step) {
    int incoming = wrapRank(r - step - 1, n);
    forEachChunk(blocks.offsets[incoming], blocks.counts[incoming], chunk, [&](size_t off, size_t cnt) {
      recvs[step].push_back(links.recv(left, bytes + off * elem, cnt * elem));
    });
  }
  forEachChunk(blocks.offsets[r], blocks.counts[r], chunk, [&](size_t off, size_t cnt) {
    links.send(right, bytes + off * elem, cnt * elem);
  });
  for (int step = 0; step < n - 1; ++step) {
    int incoming = wrapRank(r - step - 1, n);
    size_t index = 0;
    forEachChunk(blocks.offsets[incoming], blocks.counts[incoming], chunk, [&](size_t off, size_t cnt) {
      links.wait(recvs[step][index++]);
      if (step + 1 < n - 1) {
        links.send(right, bytes + off * elem, cnt * elem);
      }
    });
  }
  links.waitAll();
}

} // namespace monarch
