#pragma once

// Collectives through memory that every rank of a one-host group maps
// (Links::sharedRegions; the group may be one host's ranks of a larger
// group, as in hierarchical.cc): each rank copies its data into its own
// region once, and the peers read it from there at memory speed, with no
// data over the links. Each returns false, having done nothing, when the
// message is smaller than config.shmMinBytes or the group has no shared
// regions; the caller then runs its link algorithm. No data frame carries
// the op's signature, so each compares it through shared memory first
// (shared_signature.h).

#include "algorithms/collectives.h"

namespace monarch {

bool sharedAllreduce(Links& links, void* data, size_t count, DataType type, ReduceKind kind, const AlgorithmConfig& config);
// The result lands in `data` on `root`; the other ranks' `data` is only
// read (shared_allreduce.cc).
bool sharedReduce(
    Links& links, void* data, size_t count, DataType type, ReduceKind kind, int root, const AlgorithmConfig& config);
// Reads every block of `in` and writes the reduction of this rank's block
// to `out`, which may be that block of `in` itself (shared_blocks.cc).
bool sharedReduceScatter(
    Links& links, const void* in, void* out, const Partition& blocks, DataType type, ReduceKind kind,
    const AlgorithmConfig& config);
// Publishes this rank's block from `in` (which may be that block of `out`)
// and writes every rank's block to `out`.
bool sharedAllgather(
    Links& links, const void* in, void* out, const Partition& blocks, size_t elementBytes, const AlgorithmConfig& config);
bool sharedBroadcast(Links& links, void* data, size_t bytes, int root, const AlgorithmConfig& config);
// Gather, scatter and alltoall in rounds of a slot (shared_personalized.cc:
// a scatter in a group of more than two only what fits one round); the
// arguments are those of collectives.h's.
bool sharedGather(
    Links& links, const void* in, const std::vector<void*>& outs, size_t bytes, int root, const AlgorithmConfig& config);
bool sharedScatter(
    Links& links, const std::vector<const void*>& ins, void* out, size_t bytes, int root, const AlgorithmConfig& config);
bool sharedAlltoall(
    Links& links, const void* in, const Partition& sendBlocks, void* out, const Partition& recvBlocks,
    const AlgorithmConfig& config);

} // namespace monarch
