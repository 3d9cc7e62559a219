#pragma once

// Argument checks and conversions shared by the collectives. Bad arguments
// raise at once on the caller's thread (ValueError / TypeError in Python),
// before anything is sent.

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <optional>
#include <vector>

#include "common/dtype.h"

namespace monarch {

// The dtype a tensor travels as. Types without reduction kernels (float8, ...)
// may still travel as raw bytes for ops that do not reduce.
DataType wireType(const at::Tensor& tensor);
// Elements as counted on the wire for `tensor` (bytes when it travels as bytes).
uint64_t wireCount(const at::Tensor& tensor);
// Bytes of one such element; never zero, even for an empty tensor.
size_t wireElementBytes(const at::Tensor& tensor);
// Like wireType, but only for dtypes the reduction kernels know.
DataType reducibleType(const at::Tensor& tensor, const char* op);

void checkCpuTensor(const at::Tensor& tensor, const char* op);
void checkSameLayout(const at::Tensor& expected, const at::Tensor& got, const char* op, const char* what);
at::Tensor singleTensor(const std::vector<at::Tensor>& tensors, const char* op);
void checkRoot(int64_t root, int size, const char* op);
void checkPeer(int64_t peer, int rank, int size, const char* op, const char* argument);

// How a c10d ReduceOp runs: the kernel's combining op, plus the scaling
// that AVG (after) and PREMUL_SUM (before) add.
struct ReductionPlan {
  ReduceKind kind = ReduceKind::kSum;
  uint8_t wireOp = 0; // c10d's RedOpType, compared across ranks
  bool average = false;
  std::optional<double> factor;
  std::optional<at::Tensor> factorTensor;

  void before(at::Tensor& buffer) const;
  void after(at::Tensor& buffer, int worldSize) const;
};

ReductionPlan planReduction(const c10d::ReduceOp& op, DataType type, const char* opName);

// Concatenates flattened tensors into one new contiguous buffer.
at::Tensor flattenAll(const std::vector<at::Tensor>& tensors);
// Copies consecutive slices of `flat` back into `tensors`.
void unflattenInto(const at::Tensor& flat, std::vector<at::Tensor>& tensors);

} // namespace monarch
