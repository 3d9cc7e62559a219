// reduceScatter and allgather: the degenerate cases, shared memory when the
// group has it, then direct or ring by group size (block_exchange.h).

#include "algorithms/block_exchange.h"
#include "algorithms/shared_memory.h"

namespace monarch {

namespace {

bool useDirect(const Links& links, const AlgorithmConfig& config) {
  return links.size() <= config.directMaxRanks;
}

} // namespace

void reduceScatter(Links& links, void* data, const Partition& blocks, DataType type, ReduceKind kind, const AlgorithmConfig& config) {
  if (links.size() == 1) {
    return;
  }
  if (blocks.maxCount() == 0) {
    return emptyOp(links);
  }
  if (sharedReduceScatter(links, data, blocks, type, kind, config)) {
    return;
  }
  if (useDirect(links, config)) {
    return directReduceScatter(links, data, blocks, type, kind, config);
  }
  ringReduceScatter(links, data, blocks, type, kind, config);
}

void allgather(Links& links, void* data, const Partition& blocks, size_t elementBytes, const AlgorithmConfig& config) {
  if (links.size() == 1) {
    return;
  }
  if (blocks.maxCount() == 0) {
    return emptyOp(links);
  }
  if (sharedAllgather(links, data, blocks, elementBytes, config)) {
    return;
  }
  if (useDirect(links, config)) {
    return directAllgather(links, data, blocks, elementBytes, config);
  }
  ringAllgather(links, data, blocks, elementBytes, config);
}

} // namespace monarch
