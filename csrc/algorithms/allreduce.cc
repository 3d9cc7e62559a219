#include <vector>

#include "algorithms/chunks.h"
#include "algorithms/collectives.h"
#include "algorithms/hierarchical.h"
#include "algorithms/reduce_kernels.h"
#include "algorithms/shared_memory.h"

namespace monarch {

namespace {

// Recursive doubling: log2(n) exchanges of the whole buffer. Ranks beyond
// the largest power of two first fold into a partner and get the result
// back at the end. Every rank combines the same values, so with commutative
// ops all ranks end bit-identical.
void recursiveDoubling(Links& links, char* data, size_t count, DataType type, ReduceKind kind) {
  const int n = links.size();
  const int r = links.rank();
  const size_t bytes = count * elementSize(type);
  char* scratch = static_cast<char*>(links.workspace(bytes, Links::Workspace::kAlgorithm));
  int pow2 = 1;
  while (pow2 * 2 <= n) {
    pow2 *= 2;
  }
  const int extra = n - pow2;
  int virtualRank;
  if (r < 2 * extra) {
    if (r % 2 == 0) {
      links.wait(links.send(r + 1, data, bytes));
      links.wait(links.recv(r + 1, data, bytes));
      return;
    }
    links.wait(links.recv(r - 1, scratch, bytes));
    reduceInto(data, scratch, count, type, kind);
    virtualRank = r / 2;
  } else {
    virtualRank = r - extra;
  }
  auto realRank = [&](int v) { return v < extra ? 2 * v + 1 : v + extra; };
  for (int mask = 1; mask < pow2; mask <<= 1) {
    int partner = realRank(virtualRank ^ mask);
    auto sent = links.send(partner, data, bytes);
    auto received = links.recv(partner, scratch, bytes);
    links.wait(received);
    links.wait(sent); // `data` is about to change
    reduceInto(data, scratch, count, type, kind);
  }
  if (r < 2 * extra) {
    links.wait(links.send(r - 1, data, bytes));
  }
}

} // namespace

void allreduce(Links& links, void* data, size_t count, DataType type, ReduceKind kind, const AlgorithmConfig& config) {
  const int n = links.size();
  if (n == 1) {
    return;
  }
  if (count == 0) {
    return emptyOp(links);
  }
  if (sharedAllreduce(links, data, count, type, kind, config)) {
    return;
  }
  auto* bytes = static_cast<char*>(data);
  if (count * elementSize(type) <= config.smallMessageBytes || count < static_cast<size_t>(n)) {
    recursiveDoubling(links, bytes, count, type, kind);
    return;
  }
  if (hierarchicalAllreduce(links, bytes, count, type, kind, config)) {
    return;
  }
  Partition blocks = Partition::even(count, n);
  reduceScatter(links, bytes, blocks, type, kind, config);
  allgather(links, bytes, blocks, elementSize(type), config);
}

} // namespace monarch
