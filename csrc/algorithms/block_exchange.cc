// reduceScatter(Into) and allgather: the degenerate cases, shared memory when the
// group has it, then direct or ring by group size (block_exchange.h).

#include <cstring>

#include "algorithms/block_exchange.h"
#include "algorithms/parallel.h"
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
  char* own = static_cast<char*>(data) + blocks.offsets[links.rank()] * elementSize(type);
  if (sharedReduceScatter(links, data, own, blocks, type, kind, config)) {
    return;
  }
  if (useDirect(links, config)) {
    return directReduceScatter(links, data, blocks, type, kind, config);
  }
  ringReduceScatter(links, data, blocks, type, kind, config);
}

void reduceScatterInto(
    Links& links, const void* in, void* out, const Partition& blocks, DataType type, ReduceKind kind,
    const AlgorithmConfig& config) {
  const size_t elem = elementSize(type);
  const char* own = static_cast<const char*>(in) + blocks.offsets[links.rank()] * elem;
  const size_t ownBytes = blocks.counts[links.rank()] * elem;
  if (links.size() > 1 && blocks.maxCount() > 0 && sharedReduceScatter(links, in, out, blocks, type, kind, config)) {
    return;
  }
  // The link algorithms reduce in place: on a copy, in reused staging memory.
  const size_t total = blocks.offsets.back() + blocks.counts.back();
  auto* staged = static_cast<char*>(links.workspace(total * elem, Links::Workspace::kStaging));
  std::memcpy(staged, in, total * elem);
  reduceScatter(links, staged, blocks, type, kind, config);
  std::memcpy(out, staged + (own - static_cast<const char*>(in)), ownBytes);
}

void allgather(Links& links, void* data, const Partition& blocks, size_t elementBytes, const AlgorithmConfig& config) {
  const char* own = static_cast<const char*>(data) + blocks.offsets[links.rank()] * elementBytes;
  allgatherFrom(links, own, data, blocks, elementBytes, config);
}

void allgatherFrom(
    Links& links, const void* in, void* out, const Partition& blocks, size_t elementBytes, const AlgorithmConfig& config) {
  char* own = static_cast<char*>(out) + blocks.offsets[links.rank()] * elementBytes;
  const size_t ownBytes = blocks.counts[links.rank()] * elementBytes;
  if (links.size() > 1 && blocks.maxCount() > 0 && sharedAllgather(links, in, out, blocks, elementBytes, config)) {
    return;
  }
  // The link algorithms run in place, from this rank's block of `out`. The
  // copy there goes on the group's threads, not torch's: a torch copy on the
  // worker would leave its idle threads spinning through the op that
  // follows, on cores the helpers need.
  if (own != in) {
    copySpans({{own, in, ownBytes}}, config.helpers);
  }
  if (links.size() == 1) {
    return;
  }
  if (blocks.maxCount() == 0) {
    return emptyOp(links);
  }
  if (useDirect(links, config)) {
    return directAllgather(links, out, blocks, elementBytes, config);
  }
  ringAllgather(links, out, blocks, elementBytes, config);
}

} // namespace monarch
