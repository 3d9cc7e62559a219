#pragma once

#include <cstddef>
#include <cstdint>

namespace monarch {

// Element types the host path understands. Values travel in frame headers.
enum class DataType : uint8_t {
  kFloat32 = 0,
  kFloat64 = 1,
  kFloat16 = 2,
  kBFloat16 = 3,
  kInt8 = 4,
  kUInt8 = 5,
  kInt16 = 6,
  kInt32 = 7,
  kInt64 = 8,
  kBool = 9,
  kComplex64 = 10,
  kComplex128 = 11,
  kUInt16 = 12,
  kUInt32 = 13,
  kUInt64 = 14,
  kCount = 15,
};

size_t elementSize(DataType type);
const char* dataTypeName(DataType type);
bool isFloatingPoint(DataType type); // includes half types
bool isComplex(DataType type);

// Element-wise combining operations the reduction kernels implement. AVG and
// PREMUL_SUM are SUM plus a scaling step done by the backend.
enum class ReduceKind : uint8_t {
  kSum = 0,
  kProduct = 1,
  kMin = 2,
  kMax = 3,
  kBand = 4,
  kBor = 5,
  kBxor = 6,
};

const char* reduceKindName(ReduceKind kind);

// Whether `kind` makes sense for `type` (no bitwise ops on floats, no
// ordering on complex numbers).
bool isReductionSupported(DataType type, ReduceKind kind);

} // namespace monarch
