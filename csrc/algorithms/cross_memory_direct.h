#pragma once

// The reduce-scatter, allgather and allreduce of shared_direct.h on ordinary
// tensors, which no peer can map: each rank reads its peers' buffers, and
// for the allgather and allreduce writes them, with the kernel's
// cross-memory copies (transport/remote_read/cross_memory.h), a tile at a
// time through scratch that stays in its cache. Each rank then moves the
// memory model's bytes to and from memory (benchmarks/RESULTS.md, "memory
// model"), where a copy through the slots moves about twice as many, for
// two system calls per peer and tile. The reduce-scatter reads its block of
// every peer's input and reduces it into its output; the allgather writes
// its block into every output; in the allreduce each rank reduces one chunk
// of the n tensors and writes it to all n, as on pooled tensors.
//
// Each is called right after the op's agreement (shared_signature.h), with
// every rank's places of its buffers. It returns false, having done
// nothing, on every rank when the message is below kCrossMemoryMinBytes,
// some rank's Options.cross_memory leaves the op out, or some rank cannot
// reach a peer's memory (the kernel refuses another
// process's memory to a rank that may not ptrace it: Yama's ptrace_scope 1
// or more, a process that is not dumpable, another user); the caller then
// copies through the slots. A peer found gone during the op is a
// PeerFailureError naming it. Ops that run here end at a barrier, so that
// no rank returns, free to change its tensor, while a peer still reads or
// writes it.

#include <cstdint>
#include <vector>

#include "algorithms/collectives.h"

namespace monarch {

// Below this a message goes through the slots: the per-op probe of every
// peer and the meeting on its answer cost more than the copies save.
constexpr size_t kCrossMemoryMinBytes = 1024 * 1024;

// This rank's places of an op's `in` and `out`: where each lies in its
// tensor pool (`inPool`, `outPool`; empty when not there), and its address.
BufferPlaces placesOf(const void* in, const PoolSpan& inPool, const void* out, const PoolSpan& outPool);

bool crossMemoryReduceScatter(
    Links& links, SharedRegions& regions, const std::vector<BufferPlaces>& places, const void* in, void* out,
    const Partition& blocks, DataType type, ReduceKind kind, const AlgorithmConfig& config);
bool crossMemoryAllgather(
    Links& links, SharedRegions& regions, const std::vector<BufferPlaces>& places, const void* in, void* out,
    const Partition& blocks, size_t elementBytes, const AlgorithmConfig& config);
bool crossMemoryAllreduce(
    Links& links, SharedRegions& regions, const std::vector<BufferPlaces>& places, void* data, size_t count,
    DataType type, ReduceKind kind, const AlgorithmConfig& config);

// Collectives of this process, all groups together, that ran here.
uint64_t crossMemoryOps();

} // namespace monarch
