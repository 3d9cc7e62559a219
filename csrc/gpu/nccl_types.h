#pragma once

// How c10d dtypes and reduce ops map onto NCCL's. Data movement (broadcast,
// gathers, all-to-all, send/recv) ships raw bytes, so every dtype moves;
// only reductions need an NCCL element type.

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include "gpu/nccl_library.h"

namespace monarch::gpu {

// A reduction as NCCL runs it, on a tensor viewed as `type` elements
// (complex tensors are reduced as pairs of reals).
struct NcclReduction {
  ncclRedOp_t op = ncclSum;
  ncclDataType_t type = ncclFloat32;
  // A PREMUL_SUM op made for one communicator; destroy after enqueueing.
  bool custom = false;
  // Elements per tensor element (2 for complex).
  int64_t lanes = 1;
};

// Checks on the caller's thread that NCCL can reduce `tensor` with `op`:
// raises TypeError/ValueError otherwise. `opName` is for messages.
void checkReducible(const at::Tensor& tensor, const c10d::ReduceOp& op, const char* opName);

// The NCCL op and element type for reducing `tensor` on `comm`; for
// PREMUL_SUM this creates a custom op (the factor is read at enqueue time
// from host memory, or from device memory when it is a tensor).
NcclReduction makeReduction(const at::Tensor& tensor, const c10d::ReduceOp& op, ncclComm_t comm);
void releaseReduction(const NcclReduction& reduction, ncclComm_t comm);

// Element count of `tensor` as NCCL sees it for `reduction`.
inline size_t reductionCount(const at::Tensor& tensor, const NcclReduction& reduction) {
  return static_cast<size_t>(tensor.numel() * reduction.lanes);
}

} // namespace monarch::gpu
