#pragma once

// The argument contract of each c10d collective that does not depend on where
// the tensors live: list lengths, dtypes and element counts. The host backend
// (backend/collective_ops.cc) and the GPU backend (gpu/nccl_collectives.cc) both
// check with these, passing their own check of one tensor against another
// (same device kind, dtype and count), so both raise the same errors.

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <vector>

namespace monarch {

// Raises unless `got` may stand in an op next to `expected`.
using LikeCheck = void (*)(const at::Tensor& expected, const at::Tensor& got, const char* op, const char* what);

// Raises unless `got` has the dtype and element count of `expected`.
void checkMatchesInput(const at::Tensor& expected, const at::Tensor& got, const char* op, const char* what);
// The single tensor of a one-tensor-per-rank op (the device is the caller's check).
const at::Tensor& theOnlyTensor(const std::vector<at::Tensor>& tensors, const char* op);

void checkDenseAllreduce(const c10d::AllreduceOptions& opts);

// allgather's one output list, with one tensor per rank like `input`.
const std::vector<at::Tensor>& allgatherOutputs(
    const std::vector<std::vector<at::Tensor>>& outputs, const at::Tensor& input, int size, LikeCheck like);
// all_gather_into_tensor (coalesced): one output per input, `size` times its elements.
void checkAllgatherIntoTensor(const std::vector<at::Tensor>& outputs, const std::vector<at::Tensor>& inputs, int size);
// allgather_coalesced: one output list per rank, each like `inputs`.
void checkAllgatherCoalesced(
    const std::vector<std::vector<at::Tensor>>& outputLists, const std::vector<at::Tensor>& inputs, int size, LikeCheck like);

// gather's outputs on the root (one per rank, like `input`); empty elsewhere,
// where passing outputs is an error.
std::vector<at::Tensor> gatherOutputs(
    const std::vector<std::vector<at::Tensor>>& outputs, const at::Tensor& input, int rank, int root, int size,
    LikeCheck like);
// scatter's inputs on the root (one per rank, like `output`); empty elsewhere.
std::vector<at::Tensor> scatterInputs(
    const std::vector<std::vector<at::Tensor>>& inputs, const at::Tensor& output, int rank, int root, int size,
    LikeCheck like);

// reduce_scatter's one input list, with one tensor per rank like `output`.
const std::vector<at::Tensor>& reduceScatterInputs(
    const std::vector<std::vector<at::Tensor>>& inputs, const at::Tensor& output, int size, LikeCheck like);
// reduce_scatter_tensor (coalesced): one input per output, `size` times its elements.
void checkReduceScatterTensor(const std::vector<at::Tensor>& outputs, const std::vector<at::Tensor>& inputs, int size);

// Rows along dim 0 that alltoall_base moves to (or from) each rank: the given
// split sizes, or an even split when none are given.
std::vector<size_t> alltoallRows(const at::Tensor& tensor, const std::vector<int64_t>& splits, int size, const char* which);
void checkAlltoallBaseTypes(const at::Tensor& output, const at::Tensor& input);
// alltoall: one input and one output per rank, all of the inputs' dtype.
void checkAlltoallLists(const std::vector<at::Tensor>& outputs, const std::vector<at::Tensor>& inputs, int size);

} // namespace monarch
