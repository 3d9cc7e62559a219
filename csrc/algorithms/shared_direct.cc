#include "algorithms/shared_direct.h"

#include <algorithm>

#include "algorithms/parallel.h"
#include "algorithms/reduce_kernels.h"
#include "algorithms/shared_signature.h"
#include "algorithms/shared_slots.h"
#include "transport/shm/tensor_pool.h"

namespace monarch {

namespace {

// Whether every rank's `which` buffer (input or output) is in its pool: the
// same answer on every rank, which has every rank's places.
bool inEveryPool(const std::vector<BufferPlaces>& places, PoolSpan BufferPlaces::*which) {
  return std::all_of(places.begin(), places.end(), [which](const BufferPlaces& each) { return (each.*which).inPool(); });
}

// Every rank's `which` buffer mapped here, by rank (this rank's is `own`),
// once all ranks have mapped theirs; empty on every rank otherwise.
std::vector<char*> mapEveryRank(
    Links& links, SharedRegions& regions, const std::vector<BufferPlaces>& places, PoolSpan BufferPlaces::*which,
    const void* own) {
  if (!inEveryPool(places, which)) {
    return {};
  }
  std::vector<char*> buffers(places.size(), nullptr);
  bool mapped = true;
  for (int rank = 0; rank < links.size() && mapped; ++rank) {
    buffers[rank] =
        rank == links.rank() ? static_cast<char*>(const_cast<void*>(own)) : regions.poolBlock(rank, places[rank].*which);
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
    Links& links, SharedRegions& regions, const std::vector<BufferPlaces>& places, const void* in, void* out,
    const Partition& blocks, DataType type, ReduceKind kind, const AlgorithmConfig& config) {
  const std::vector<char*> buffers = mapEveryRank(links, regions, places, &BufferPlaces::input, in);
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

namespace {

// Pushes this rank's block into every rank's output (`outputs`, by rank): each
// piece of the block is read once and written n times while it is in the
// cache, so the rank reads its block once where pulling reads all n.
void pushBlock(
    const std::vector<char*>& outputs, int rank, const void* in, const Partition& blocks, size_t elementBytes,
    HelperPool* helpers, bool streaming) {
  const int n = static_cast<int>(outputs.size());
  const auto* block = static_cast<const char*>(in);
  const size_t at = blocks.offsets[rank] * elementBytes;
  forEachSlice(blocks.counts[rank] * elementBytes, 1, helpers, [&](size_t begin, size_t end) {
    // From the next rank's output on: the ranks start on different outputs.
    std::vector<char*> destinations;
    for (int step = 1; step <= n; ++step) {
      char* to = outputs[(rank + step) % n] + at + begin;
      if (to != block + begin) { // an in-place allgather's own block is there already
        destinations.push_back(to);
      }
    }
    copyToEach(destinations, block + begin, end - begin, streaming);
  });
}

// Pulls every rank's block (`inputs`, by rank) into this rank's output.
void pullBlocks(
    const std::vector<char*>& inputs, int rank, void* out, const Partition& blocks, size_t elementBytes,
    HelperPool* helpers, bool streaming) {
  const int n = static_cast<int>(inputs.size());
  auto* result = static_cast<char*>(out);
  std::vector<CopySpan> spans;
  // From the next rank's block on: the ranks start on different sources
  // rather than all reading rank 0's block at once.
  for (int step = 1; step <= n; ++step) {
    const int owner = (rank + step) % n;
    char* to = result + blocks.offsets[owner] * elementBytes;
    if (to != inputs[owner]) { // an in-place allgather's own block is there already
      spans.push_back({to, inputs[owner], blocks.counts[owner] * elementBytes});
    }
  }
  copySpans(spans, helpers, streaming);
}

} // namespace

bool directAllgather(
    Links& links, SharedRegions& regions, const std::vector<BufferPlaces>& places, const void* in, void* out,
    const Partition& blocks, size_t elementBytes, const AlgorithmConfig& config) {
  const bool streaming = writesResultsStreaming(blocks.maxCount() * elementBytes * links.size());
  // Every output pooled: each rank writes its block into all of them.
  const std::vector<char*> outputs = mapEveryRank(links, regions, places, &BufferPlaces::output, out);
  if (!outputs.empty()) {
    pushBlock(outputs, links.rank(), in, blocks, elementBytes, config.helpers, streaming);
    finish(regions);
    return true;
  }
  const std::vector<char*> inputs = mapEveryRank(links, regions, places, &BufferPlaces::input, in);
  if (inputs.empty()) {
    return false;
  }
  pullBlocks(inputs, links.rank(), out, blocks, elementBytes, config.helpers, streaming);
  finish(regions);
  return true;
}

bool directAllreduce(
    Links& links, SharedRegions& regions, const std::vector<BufferPlaces>& tensors, void* data, size_t count, DataType type,
    ReduceKind kind, const AlgorithmConfig& config) {
  const std::vector<char*> buffers = mapEveryRank(links, regions, tensors, &BufferPlaces::input, data);
  if (buffers.empty()) {
    return false;
  }
  const int n = links.size();
  const size_t elem = elementSize(type);
  const auto [begin, length] = chunkOfRank(count, elem, n, links.rank());
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
