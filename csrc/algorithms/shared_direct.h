#pragma once

// The shared-memory reduce-scatter, allgather and allreduce on tensors in
// every rank's pool (transport/shm/tensor_pool.h): each rank maps its peers'
// pool blocks and reads, and for the allreduce writes, their tensors where
// they lie, with no copy into the slots. Each rank then moves the model's
// bytes (benchmarks/RESULTS.md, "memory model"): the reduce-scatter reads
// every rank's copy of its block once and writes its result; the allgather,
// where every output is pooled, reads its own block once and writes it into
// all n outputs (else it reads every block once and writes its own output);
// in the allreduce each rank reduces one chunk of the n tensors and writes
// it to all n.
//
// Each is called right after the op's agreement (shared_signature.h), with
// every rank's places of its input and output; the ranks' places are the same
// on every rank. Returns false, having done nothing, on every rank when
// some buffer is not in its rank's pool or some rank cannot map a peer's
// block; the caller then copies through the slots. Ops that run here end
// at a barrier, so that no rank returns, free to change its tensor, while a
// peer still reads or writes it.

#include <vector>

#include "algorithms/collectives.h"

namespace monarch {

bool directReduceScatter(
    Links& links, SharedRegions& regions, const std::vector<BufferPlaces>& places, const void* in, void* out,
    const Partition& blocks, DataType type, ReduceKind kind, const AlgorithmConfig& config);
bool directAllgather(
    Links& links, SharedRegions& regions, const std::vector<BufferPlaces>& places, const void* in, void* out,
    const Partition& blocks, size_t elementBytes, const AlgorithmConfig& config);
bool directAllreduce(
    Links& links, SharedRegions& regions, const std::vector<BufferPlaces>& tensors, void* data, size_t count, DataType type,
    ReduceKind kind, const AlgorithmConfig& config);

} // namespace monarch
