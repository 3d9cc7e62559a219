#include "contract/tensor_args.h"

#include "contract/collective_args.h"

#include <c10/util/Exception.h>

namespace monarch {

namespace {

std::optional<DataType> knownType(at::ScalarType type) {
  switch (type) {
    case at::kFloat:
      return DataType::kFloat32;
    case at::kDouble:
      return DataType::kFloat64;
    case at::kHalf:
      return DataType::kFloat16;
    case at::kBFloat16:
      return DataType::kBFloat16;
    case at::kChar:
      return DataType::kInt8;
    case at::kByte:
      return DataType::kUInt8;
    case at::kShort:
      return DataType::kInt16;
    case at::kInt:
      return DataType::kInt32;
    case at::kLong:
      return DataType::kInt64;
    case at::kBool:
      return DataType::kBool;
    case at::kComplexFloat:
      return DataType::kComplex64;
    case at::kComplexDouble:
      return DataType::kComplex128;
    case at::kUInt16:
      return DataType::kUInt16;
    case at::kUInt32:
      return DataType::kUInt32;
    case at::kUInt64:
      return DataType::kUInt64;
    default:
      return std::nullopt;
  }
}

} // namespace

DataType wireType(const at::Tensor& tensor) {
  return knownType(tensor.scalar_type()).value_or(DataType::kUInt8);
}

uint64_t wireCount(const at::Tensor& tensor) {
  return knownType(tensor.scalar_type()) ? tensor.numel() : tensor.nbytes();
}

size_t wireElementBytes(const at::Tensor& tensor) {
  return knownType(tensor.scalar_type()) ? tensor.element_size() : 1;
}

DataType reducibleType(const at::Tensor& tensor, const char* op) {
  auto type = knownType(tensor.scalar_type());
  TORCH_CHECK_TYPE(type.has_value(), op, ": dtype ", tensor.scalar_type(), " cannot be reduced by the monarch backend");
  return *type;
}

void checkCpuTensor(const at::Tensor& tensor, const char* op) {
  TORCH_CHECK_VALUE(tensor.defined(), op, ": got an undefined tensor");
  TORCH_CHECK_NOT_IMPLEMENTED(
      tensor.device().is_cpu(), op, ": tensors on ", tensor.device(),
      " are not supported by the monarch backend (CPU and CUDA tensors only)");
  TORCH_CHECK_VALUE(tensor.layout() == at::kStrided, op, ": only dense (strided) tensors are supported, got ", tensor.layout());
}

void checkSameLayout(const at::Tensor& expected, const at::Tensor& got, const char* op, const char* what) {
  checkCpuTensor(got, op);
  checkMatchesInput(expected, got, op, what);
}

at::Tensor singleTensor(const std::vector<at::Tensor>& tensors, const char* op) {
  const at::Tensor& tensor = theOnlyTensor(tensors, op);
  checkCpuTensor(tensor, op);
  return tensor;
}

void checkRoot(int64_t root, int size, const char* op) {
  TORCH_CHECK_VALUE(root >= 0 && root < size, op, ": invalid root rank ", root, " for a group of size ", size);
}

void checkPeer(int64_t peer, int rank, int size, const char* op, const char* argument) {
  TORCH_CHECK_VALUE(peer >= 0 && peer < size, op, ": invalid ", argument, " ", peer, " for a group of size ", size);
  TORCH_CHECK_VALUE(peer != rank, op, ": ", argument, " ", peer, " is this rank itself");
}

ReductionPlan planReduction(const c10d::ReduceOp& op, DataType type, const char* opName) {
  ReductionPlan plan;
  plan.wireOp = static_cast<uint8_t>(op.op_);
  const bool floating = isFloatingPoint(type) || isComplex(type);
  switch (op.op_) {
    case c10d::ReduceOp::SUM:
      plan.kind = ReduceKind::kSum;
      break;
    case c10d::ReduceOp::AVG:
      TORCH_CHECK_TYPE(floating, opName, ": AVG needs a floating point or complex tensor, got ", dataTypeName(type));
      plan.kind = ReduceKind::kSum;
      plan.average = true;
      break;
    case c10d::ReduceOp::PRODUCT:
      plan.kind = ReduceKind::kProduct;
      break;
    case c10d::ReduceOp::MIN:
      plan.kind = ReduceKind::kMin;
      break;
    case c10d::ReduceOp::MAX:
      plan.kind = ReduceKind::kMax;
      break;
    case c10d::ReduceOp::BAND:
      plan.kind = ReduceKind::kBand;
      break;
    case c10d::ReduceOp::BOR:
      plan.kind = ReduceKind::kBor;
      break;
    case c10d::ReduceOp::BXOR:
      plan.kind = ReduceKind::kBxor;
      break;
    case c10d::ReduceOp::PREMUL_SUM: {
      TORCH_CHECK_TYPE(floating, opName, ": PREMUL_SUM needs a floating point or complex tensor, got ", dataTypeName(type));
      // torch 2.11 names it NCCLPreMulSumSupplement; 2.13 keeps that name as an alias.
      auto* supplement = dynamic_cast<c10d::NCCLPreMulSumSupplement*>(op.supplement_.get());
      TORCH_CHECK_VALUE(supplement != nullptr, opName, ": PREMUL_SUM without a factor");
      plan.kind = ReduceKind::kSum;
      if (supplement->tensor_factor.defined()) {
        plan.factorTensor = supplement->tensor_factor.to(at::kCPU);
      } else {
        plan.factor = supplement->double_factor;
      }
      break;
    }
    default:
      TORCH_CHECK_VALUE(false, opName, ": unsupported reduce op ", static_cast<int>(op.op_));
  }
  TORCH_CHECK_TYPE(
      isReductionSupported(type, plan.kind), opName, ": reduce op ", reduceKindName(plan.kind),
      " makes no sense for dtype ", dataTypeName(type));
  return plan;
}

void ReductionPlan::before(at::Tensor& buffer) const {
  if (factor) {
    buffer.mul_(*factor);
  } else if (factorTensor) {
    buffer.mul_(*factorTensor);
  }
}

void ReductionPlan::after(at::Tensor& buffer, int worldSize) const {
  if (average) {
    buffer.div_(worldSize);
  }
}

at::Tensor flattenAll(const std::vector<at::Tensor>& tensors) {
  std::vector<at::Tensor> flat;
  flat.reserve(tensors.size());
  for (const auto& tensor : tensors) {
    flat.push_back(tensor.reshape({-1}));
  }
  return at::cat(flat);
}

void unflattenInto(const at::Tensor& flat, std::vector<at::Tensor>& tensors) {
  int64_t offset = 0;
  for (auto& tensor : tensors) {
    tensor.copy_(flat.narrow(0, offset, tensor.numel()).view(tensor.sizes()));
    offset += tensor.numel();
  }
}

} // namespace monarch
