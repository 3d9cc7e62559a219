#include "common/dtype.h"

namespace monarch {

size_t elementSize(DataType type) {
  switch (type) {
    case DataType::kBool:
    case DataType::kInt8:
    case DataType::kUInt8:
      return 1;
    case DataType::kFloat16:
    case DataType::kBFloat16:
    case DataType::kInt16:
    case DataType::kUInt16:
      return 2;
    case DataType::kFloat32:
    case DataType::kInt32:
    case DataType::kUInt32:
      return 4;
    case DataType::kFloat64:
    case DataType::kInt64:
    case DataType::kUInt64:
    case DataType::kComplex64:
      return 8;
    case DataType::kComplex128:
      return 16;
    case DataType::kCount:
      break;
  }
  return 0;
}

const char* dataTypeName(DataType type) {
  static const char* const kNames[] = {
      "float32", "float64", "float16", "bfloat16", "int8",
      "uint8",   "int16",   "int32",   "int64",    "bool",
      "complex64", "complex128", "uint16", "uint32", "uint64"};
  auto index = static_cast<size_t>(type);
  return index < sizeof(kNames) / sizeof(kNames[0]) ? kNames[index] : "invalid";
}

bool isFloatingPoint(DataType type) {
  return type == DataType::kFloat32 || type == DataType::kFloat64 ||
      type == DataType::kFloat16 || type == DataType::kBFloat16;
}

bool isComplex(DataType type) {
  return type == DataType::kComplex64 || type == DataType::kComplex128;
}

const char* reduceKindName(ReduceKind kind) {
  static const char* const kNames[] = {
      "SUM", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR"};
  auto index = static_cast<size_t>(kind);
  return index < sizeof(kNames) / sizeof(kNames[0]) ? kNames[index] : "invalid";
}

bool isReductionSupported(DataType type, ReduceKind kind) {
  switch (kind) {
    case ReduceKind::kSum:
    case ReduceKind::kProduct:
      return true;
    case ReduceKind::kMin:
    case ReduceKind::kMax:
      return !isComplex(type);
    case ReduceKind::kBand:
    case ReduceKind::kBor:
    case ReduceKind::kBxor:
      return !isFloatingPoint(type) && !isComplex(type);
  }
  return false;
}

} // namespace monarch
