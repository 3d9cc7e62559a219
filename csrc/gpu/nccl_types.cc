#include "gpu/nccl_types.h"

#include <c10/util/Exception.h>

#include <optional>

#include "gpu/compat.h"

namespace monarch::gpu {

namespace {

// torch 2.11 calls it NCCLPreMulSumSupplement; 2.13 renamed it and kept this name as an alias.
using PreMulSum = c10d::NCCLPreMulSumSupplement;

// NCCL's element type for reductions, after complex tensors are viewed as reals.
std::optional<ncclDataType_t> reductionType(at::ScalarType type) {
  switch (type) {
    case at::kFloat:
    case at::kComplexFloat:
      return ncclFloat32;
    case at::kDouble:
    case at::kComplexDouble:
      return ncclFloat64;
    case at::kHalf:
      return ncclFloat16;
    case at::kBFloat16:
      return ncclBfloat16;
    case at::kChar:
      return ncclInt8;
    case at::kByte:
    case at::kBool:
      return ncclUint8;
    case at::kInt:
      return ncclInt32;
    case at::kUInt32:
      return ncclUint32;
    case at::kLong:
      return ncclInt64;
    case at::kUInt64:
      return ncclUint64;
    default:
      return std::nullopt;
  }
}

// Bool reductions are logical: SUM/BOR/MAX is "any", PRODUCT/BAND/MIN "all".
std::optional<ncclRedOp_t> boolOp(c10d::ReduceOp::RedOpType op) {
  switch (op) {
    case c10d::ReduceOp::SUM:
    case c10d::ReduceOp::BOR:
    case c10d::ReduceOp::MAX:
      return ncclMax;
    case c10d::ReduceOp::PRODUCT:
    case c10d::ReduceOp::BAND:
    case c10d::ReduceOp::MIN:
      return ncclMin;
    default:
      return std::nullopt;
  }
}

const char* reduceOpName(c10d::ReduceOp::RedOpType op) {
  switch (op) {
    case c10d::ReduceOp::SUM:
      return "SUM";
    case c10d::ReduceOp::AVG:
      return "AVG";
    case c10d::ReduceOp::PRODUCT:
      return "PRODUCT";
    case c10d::ReduceOp::MIN:
      return "MIN";
    case c10d::ReduceOp::MAX:
      return "MAX";
    case c10d::ReduceOp::BAND:
      return "BAND";
    case c10d::ReduceOp::BOR:
      return "BOR";
    case c10d::ReduceOp::BXOR:
      return "BXOR";
    case c10d::ReduceOp::PREMUL_SUM:
      return "PREMUL_SUM";
    default:
      return "UNUSED";
  }
}

bool isFloating(at::ScalarType type) {
  return at::isFloatingType(type) || at::isComplexType(type);
}

} // namespace

void checkReducible(const at::Tensor& tensor, const c10d::ReduceOp& op, const char* opName) {
  at::ScalarType type = tensor.scalar_type();
  TORCH_CHECK_TYPE(
      reductionType(type).has_value(), opName, ": dtype ", type, " cannot be reduced by ", kCollectivesName,
      " (it has no such element type)");
  if (type == at::kBool) {
    TORCH_CHECK_TYPE(
        boolOp(op.op_).has_value(), opName, ": reduce op ", reduceOpName(op.op_), " makes no sense for bool tensors");
    return;
  }
  switch (op.op_) {
    case c10d::ReduceOp::SUM:
      return;
    case c10d::ReduceOp::PRODUCT:
    case c10d::ReduceOp::MIN:
    case c10d::ReduceOp::MAX:
      TORCH_CHECK_TYPE(
          !at::isComplexType(type), opName, ": reduce op ", reduceOpName(op.op_), " makes no sense for complex tensors");
      return;
    case c10d::ReduceOp::AVG:
      TORCH_CHECK_TYPE(isFloating(type), opName, ": AVG needs a floating point or complex tensor, got ", type);
      return;
    case c10d::ReduceOp::PREMUL_SUM: {
      TORCH_CHECK_TYPE(isFloating(type), opName, ": PREMUL_SUM needs a floating point or complex tensor, got ", type);
      auto* supplement = dynamic_cast<PreMulSum*>(op.supplement_.get());
      TORCH_CHECK_VALUE(supplement != nullptr, opName, ": PREMUL_SUM without a factor");
      TORCH_CHECK_VALUE(
          !supplement->tensor_factor.defined() || supplement->tensor_factor.numel() == 1, opName,
          ": the PREMUL_SUM factor tensor must have one element");
      TORCH_CHECK_TYPE(
          !supplement->tensor_factor.defined() || !at::isComplexType(supplement->tensor_factor.scalar_type()), opName,
          ": a complex PREMUL_SUM factor is not supported on GPU tensors");
      return;
    }
    default:
      TORCH_CHECK_TYPE(
          false, opName, ": reduce op ", reduceOpName(op.op_), " is not supported for GPU tensors of dtype ", type, " (",
          kCollectivesName, " has no bitwise reductions)");
  }
}

NcclReduction makeReduction(const at::Tensor& tensor, const c10d::ReduceOp& op, ncclComm_t comm) {
  at::ScalarType type = tensor.scalar_type();
  NcclReduction reduction;
  reduction.type = *reductionType(type);
  reduction.lanes = at::isComplexType(type) ? 2 : 1;
  if (type == at::kBool) {
    reduction.op = *boolOp(op.op_);
    return reduction;
  }
  switch (op.op_) {
    case c10d::ReduceOp::PRODUCT:
      reduction.op = ncclProd;
      break;
    case c10d::ReduceOp::MIN:
      reduction.op = ncclMin;
      break;
    case c10d::ReduceOp::MAX:
      reduction.op = ncclMax;
      break;
    case c10d::ReduceOp::AVG:
      reduction.op = ncclAvg;
      break;
    case c10d::ReduceOp::PREMUL_SUM: {
      auto* supplement = dynamic_cast<PreMulSum*>(op.supplement_.get());
      const auto& api = NcclLibrary::get().api();
      at::ScalarType real = at::toRealValueType(type);
      ncclResult_t result;
      if (supplement->tensor_factor.defined()) {
        // Read by the kernel. Made on the communicator's stream (the caller's
        // current stream here), so freeing it after enqueueing is safe: the
        // allocator reuses it only for work ordered after this op.
        at::Tensor factor = supplement->tensor_factor.to(tensor.device(), real).contiguous();
        result = api.redOpCreatePreMulSum(&reduction.op, factor.data_ptr(), reduction.type, ncclScalarDevice, comm);
      } else {
        // Host scalars are copied at creation.
        at::Tensor factor = at::scalar_tensor(supplement->double_factor, at::TensorOptions().dtype(real));
        result = api.redOpCreatePreMulSum(&reduction.op, factor.data_ptr(), reduction.type, ncclScalarHostImmediate, comm);
      }
      TORCH_CHECK(result == ncclSuccess, "PREMUL_SUM: ", NcclLibrary::get().describe(result, comm));
      reduction.custom = true;
      break;
    }
    default:
      reduction.op = ncclSum;
  }
  return reduction;
}

void releaseReduction(const NcclReduction& reduction, ncclComm_t comm) {
  if (reduction.custom) {
    NcclLibrary::get().api().redOpDestroy(reduction.op, comm);
  }
}

} // namespace monarch::gpu
