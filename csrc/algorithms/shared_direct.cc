#include "algorithms/shared_direct.h"

#include <algorithm>

#include "algorithms/parallel.h"
#include "algorithms/reduce_kernels.h"
#include "algorithms/shared_signature.h"
#include "algorithms/shared_slots.h"
#include "transport/shm/tensor_pool.h"

namespace monarch {

namespace {

// Every rank's buffer mapped here, by rank (this rank's is `own`), once all
// ranks have mapped theirs; empty on every rank otherwise.
std::vector<char*> mapEveryRank(
    Links& links, SharedRegions& regions, const std::vector<PoolSpan>& spans, const void* own) {
  if (!std::all_of(spans.begin(), spans.end(), [](const PoolSpan& span) { return span.inPool(); })) {
    return {};
  }
  std::vector<char*> buffers(spans.size(), nullptr);
  bool mapped = true;
  for (int rank = 0; rank < links.size() && mapped; ++rank) {
    buffers[rank] = rank == links.rank() ? static_cast<char*>(const_cast<void*>(own)) : regions.poolBlock(rank, spans[rank]);
    mapped = buffers[rank] != nullptr;
  }
  if (!everyRankCan(links, regions, mapped)) {
    return {};
  }
  return buffers;
}

void finish(SharedRegions& regions) {
  regions.barrier();
  SharedTensorPool::instance().countDirectOp();
}

} // namespace

bool directReduceScatter(
    Links& links, SharedRegions& regions, const std::vector<PoolSpan>& inputs, const void* in, void* out,
    const Partition& blocks, DataType type, ReduceKind kind, const AlgorithmConfig& config) {
  const std::vector<char*> buffers = mapEveryRank(links, regions, inputs, in);
  if (buffers.empty()) {
    return false;
  }
  const int r = links.rank();
  const size_t elem = elementSize(type);
  // In rank order: the result does not depend on which rank reduced it.
  std::vector<const void*> copies;
  for (char* buffer : buffers) {
    copies.push_back(buffer + blocks.offsets[r] * elem);
  }
  const size_t messageBytes = blocks.maxCount() * elem * links.size();
  reduceToEach({out}, copies, blocks.counts[r], type, kind, config.helpers, writesResultsStreaming(messageBytes));
  finish(regions);
  return true;
}

bool directAllgather(
    Links& links, SharedRegions& regions, const std::vector<PoolSpan>& inputs, const void* in, void* out,
    const Partition& blocks, size_t elementBytes, const AlgorithmConfig& config) {
  const std::vector<char*> buffers = mapEveryRank(links, regions, inputs, in);
  if (buffers.empty()) {
    return false;
  }
  auto* result = static_cast<char*>(out);
  std::vector<CopySpan> spans;
  // From the next rank's block on: the ranks start on different sources
  // rather than all reading rank 0's block at once.
  for (int step = 1; step <= links.size(); ++step) {
    const int rank = (links.rank() + step) % links.size();
    char* to = result + blocks.offsets[rank] * elementBytes;
    if (to != buffers[rank]) { // an in-place allgather's own block is there already
      spans.push_back({to, buffers[rank], blocks.counts[rank] * elementBytes});
    }
  }
  const size_t messageBytes = blocks.maxCount() * elementBytes * links.size();
  copySpans(spans, config.helpers, writesResultsStreaming(messageBytes));
  finish(regions);
  return true;
}

bool directAllreduce(
    Links& links, SharedRegions& regions, const std::vector<PoolSpan>& tensors, void* data, size_t count, DataType type,
    ReduceKind kind, const AlgorithmConfig& config) {
  const std::vector<char*> buffers = mapEveryRank(links, regions, tensors, data);
  if (buffers.empty()) {
    return false;
  }
  const int n = links.size();
  const size_t elem = elementSize(type);
  // This rank's chunk, whole cache lines: no two ranks write one line.
  const size_t line = std::max<size_t>(1, kSlotAlignment / elem);
  const size_t chunk = ((count + n - 1) / n + line - 1) / line * line;
  const size_t begin = std::min(count, chunk * static_cast<size_t>(links.rank()));
  const size_t length = std::min(chunk, count - begin);
  std::vector<const void*> inputs;
  std::vector<void*> outputs;
  for (char* buffer : buffers) {
    inputs.push_back(buffer + begin * elem);
    outputs.push_back(buffer + begin * elem);
  }
  // Each rank reads and writes only its own chunk of every tensor, so no
  // rank writes what another still has to read. Cached stores at every size:
  // each result goes over the line it was just read from, which a streaming
  // store would push out to memory.
  reduceToEach(outputs, inputs, length, type, kind, config.helpers, /*streaming=*/false);
  finish(regions);
  return true;
}

} // namespace monarch
