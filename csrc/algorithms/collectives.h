#pragma once

// The collective algorithms, written once over the Links interface. Buffers
// are contiguous and hold elements of one dtype; a Partition says where each
// rank's block lives. Failures surface as OpFailure from Links::wait.

#include <cstddef>
#include <string>
#include <vector>

#include "transport/links.h"
#include "common/dtype.h"

namespace monarch {

class HelperPool;

// Set from torch_monarch.Options, which owns the defaults (options.py).
struct AlgorithmConfig {
  // Messages up to this size take the latency-bound algorithms.
  size_t smallMessageBytes = 0;
  // Large messages move in chunks of this size so that sending, receiving
  // and reducing overlap.
  size_t chunkBytes = 0;
  // Groups up to this size reduce-scatter and allgather large messages
  // all-pairs (one step) instead of around a ring (n-1 steps).
  int directMaxRanks = 0;
  // Messages of at least this size among ranks on one host go through
  // shared memory (shared_memory.h).
  size_t shmMinBytes = 0;
  // Which of them read and write their peers' buffers with the kernel's
  // cross-memory copies where they can (cross_memory_direct.h):
  // "allreduce", "all" (the reduce-scatter and allgather too) or "off".
  std::string crossMemory = "off";
  // The group's threads that reduce and copy large messages, its worker
  // included (null: the worker alone).
  HelperPool* helpers = nullptr;
};

// Block i of a buffer: `counts[i]` elements starting at element `offsets[i]`.
struct Partition {
  std::vector<size_t> offsets;
  std::vector<size_t> counts;

  static Partition even(size_t count, int parts);
  static Partition fromCounts(const std::vector<size_t>& counts);
  size_t maxCount() const;
};

void allreduce(Links& links, void* data, size_t count, DataType type, ReduceKind kind, const AlgorithmConfig& config);
void broadcast(Links& links, void* data, size_t bytes, int root, const AlgorithmConfig& config);
// The result lands in `data` on `root`; other ranks' `data` is only read.
void reduce(Links& links, void* data, size_t count, DataType type, ReduceKind kind, int root, const AlgorithmConfig& config);
// `data` holds every rank's block as laid out by `blocks`; on return this
// rank's block holds the reduction of that block over all ranks. Other
// blocks are scratch.
void reduceScatter(Links& links, void* data, const Partition& blocks, DataType type, ReduceKind kind, const AlgorithmConfig& config);
// The same out of place: `in` holds every rank's block and stays as it is;
// this rank's reduced block is written to `out`. On one host it reads `in`
// where it lies; over the links it reduces a staged copy.
void reduceScatterInto(
    Links& links, const void* in, void* out, const Partition& blocks, DataType type, ReduceKind kind,
    const AlgorithmConfig& config);
// `data` holds this rank's block; on return it holds every rank's block.
void allgather(Links& links, void* data, const Partition& blocks, size_t elementBytes, const AlgorithmConfig& config);
// The same with this rank's block read from `in` (which may be that block
// of `out`): on one host it goes from `in` to the peers and to `out` in one
// pass, with no copy before the op.
void allgatherFrom(
    Links& links, const void* in, void* out, const Partition& blocks, size_t elementBytes, const AlgorithmConfig& config);
// Root receives rank p's `bytes` into `outs[p]` (its own too: copied from
// `in`, unless `outs[root]` is `in`); `in` is this rank's contribution. The
// other ranks pass no `outs`.
void gather(
    Links& links, const void* in, const std::vector<void*>& outs, size_t bytes, int root, const AlgorithmConfig& config);
// Rank p receives root's `ins[p]` (`bytes` long) into `out`; only the root
// passes `ins`.
void scatter(
    Links& links, const std::vector<const void*>& ins, void* out, size_t bytes, int root, const AlgorithmConfig& config);
// Sends the byte range `sendBlocks[p]` of `in` to rank p and receives rank
// p's into `recvBlocks[p]` of `out`.
void alltoall(
    Links& links, const void* in, const Partition& sendBlocks, void* out, const Partition& recvBlocks,
    const AlgorithmConfig& config);
void barrier(Links& links);
// An op with nothing to move still announces its signature to every peer
// (Links::announce), so that a peer that called it with data, and waits for
// this rank, finds out instead of waiting until its timeout.
void emptyOp(Links& links);

} // namespace monarch
