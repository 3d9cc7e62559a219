#include "algorithms/reduce_kernels.h"

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <complex>
#include <cstdint>
#include <cstring>
#include <stdexcept>

#include "algorithms/parallel.h"

namespace monarch {

namespace {

// reduceAllInto's tile: a fraction of a core's L1 data cache, so that the
// tile of acc stays there while every input streams past it.
constexpr size_t kTileBytes = 16 * 1024;

// Plain loops over __restrict pointers: the compiler vectorises them for the
// native types. Half types widen to float per element.
template <typename T, typename Op>
void combine(void* accRaw, const void* inRaw, size_t count, Op op) {
  T* __restrict acc = static_cast<T*>(accRaw);
  const T* __restrict in = static_cast<const T*>(inRaw);
  for (size_t i = 0; i < count; ++i) {
    acc[i] = op(acc[i], in[i]);
  }
}

template <typename T>
void reduceArithmetic(void* acc, const void* in, size_t count, ReduceKind kind) {
  switch (kind) {
    case ReduceKind::kSum:
      return combine<T>(acc, in, count, [](T a, T b) { return static_cast<T>(a + b); });
    case ReduceKind::kProduct:
      return combine<T>(acc, in, count, [](T a, T b) { return static_cast<T>(a * b); });
    case ReduceKind::kMin:
      return combine<T>(acc, in, count, [](T a, T b) { return b < a ? b : a; });
    case ReduceKind::kMax:
      return combine<T>(acc, in, count, [](T a, T b) { return a < b ? b : a; });
    default:
      throw std::invalid_argument("bitwise reduction on a floating point type");
  }
}

template <typename T>
void reduceFloat(void* acc, const void* in, size_t count, ReduceKind kind) {
  // NaN propagates through MIN and MAX, as torch.minimum/maximum do.
  switch (kind) {
    case ReduceKind::kMin:
      return combine<T>(acc, in, count, [](T a, T b) { return (b < a || b != b) ? b : a; });
    case ReduceKind::kMax:
      return combine<T>(acc, in, count, [](T a, T b) { return (a < b || b != b) ? b : a; });
    default:
      return reduceArithmetic<T>(acc, in, count, kind);
  }
}

template <typename Half>
void reduceHalf(void* acc, const void* in, size_t count, ReduceKind kind) {
  switch (kind) {
    case ReduceKind::kSum:
      return combine<Half>(acc, in, count, [](Half a, Half b) { return Half(float(a) + float(b)); });
    case ReduceKind::kProduct:
      return combine<Half>(acc, in, count, [](Half a, Half b) { return Half(float(a) * float(b)); });
    case ReduceKind::kMin:
      return combine<Half>(acc, in, count, [](Half a, Half b) {
        float x = a, y = b;
        return (y < x || y != y) ? b : a;
      });
    case ReduceKind::kMax:
      return combine<Half>(acc, in, count, [](Half a, Half b) {
        float x = a, y = b;
        return (x < y || y != y) ? b : a;
      });
    default:
      throw std::invalid_argument("bitwise reduction on a floating point type");
  }
}

template <typename T>
void reduceInteger(void* acc, const void* in, size_t count, ReduceKind kind) {
  switch (kind) {
    case ReduceKind::kBand:
      return combine<T>(acc, in, count, [](T a, T b) { return static_cast<T>(a & b); });
    case ReduceKind::kBor:
      return combine<T>(acc, in, count, [](T a, T b) { return static_cast<T>(a | b); });
    case ReduceKind::kBxor:
      return combine<T>(acc, in, count, [](T a, T b) { return static_cast<T>(a ^ b); });
    default:
      return reduceArithmetic<T>(acc, in, count, kind);
  }
}

// bool: SUM and MAX are logical or, PRODUCT and MIN logical and.
void reduceBool(void* acc, const void* in, size_t count, ReduceKind kind) {
  switch (kind) {
    case ReduceKind::kSum:
    case ReduceKind::kMax:
    case ReduceKind::kBor:
      return combine<uint8_t>(acc, in, count, [](uint8_t a, uint8_t b) { return uint8_t((a | b) != 0); });
    case ReduceKind::kProduct:
    case ReduceKind::kMin:
    case ReduceKind::kBand:
      return combine<uint8_t>(acc, in, count, [](uint8_t a, uint8_t b) { return uint8_t((a & b) != 0); });
    case ReduceKind::kBxor:
      return combine<uint8_t>(acc, in, count, [](uint8_t a, uint8_t b) { return uint8_t((a != 0) != (b != 0)); });
  }
}

template <typename T>
void reduceComplex(void* acc, const void* in, size_t count, ReduceKind kind) {
  switch (kind) {
    case ReduceKind::kSum:
      return combine<T>(acc, in, count, [](T a, T b) { return a + b; });
    case ReduceKind::kProduct:
      return combine<T>(acc, in, count, [](T a, T b) { return a * b; });
    default:
      throw std::invalid_argument("ordering or bitwise reduction on a complex type");
  }
}

} // namespace

void reduceInto(void* acc, const void* in, size_t count, DataType type, ReduceKind kind) {
  switch (type) {
    case DataType::kFloat32:
      return reduceFloat<float>(acc, in, count, kind);
    case DataType::kFloat64:
      return reduceFloat<double>(acc, in, count, kind);
    case DataType::kFloat16:
      return reduceHalf<c10::Half>(acc, in, count, kind);
    case DataType::kBFloat16:
      return reduceHalf<c10::BFloat16>(acc, in, count, kind);
    case DataType::kInt8:
      return reduceInteger<int8_t>(acc, in, count, kind);
    case DataType::kUInt8:
      return reduceInteger<uint8_t>(acc, in, count, kind);
    case DataType::kInt16:
      return reduceInteger<int16_t>(acc, in, count, kind);
    case DataType::kUInt16:
      return reduceInteger<uint16_t>(acc, in, count, kind);
    case DataType::kInt32:
      return reduceInteger<int32_t>(acc, in, count, kind);
    case DataType::kUInt32:
      return reduceInteger<uint32_t>(acc, in, count, kind);
    case DataType::kInt64:
      return reduceInteger<int64_t>(acc, in, count, kind);
    case DataType::kUInt64:
      return reduceInteger<uint64_t>(acc, in, count, kind);
    case DataType::kBool:
      return reduceBool(acc, in, count, kind);
    case DataType::kComplex64:
      return reduceComplex<std::complex<float>>(acc, in, count, kind);
    case DataType::kComplex128:
      return reduceComplex<std::complex<double>>(acc, in, count, kind);
    case DataType::kCount:
      break;
  }
  throw std::invalid_argument("reduction on an unknown dtype");
}

void reduceAllInto(
    void* acc, const std::vector<const void*>& inputs, size_t count, DataType type, ReduceKind kind, HelperPool* helpers,
    void* alsoTo) {
  const size_t elem = elementSize(type);
  const size_t tile = kTileBytes / elem;
  forEachSlice(count, elem, helpers, [&](size_t begin, size_t end) {
    for (size_t from = begin; from < end; from += tile) {
      const size_t length = std::min(tile, end - from);
      char* target = static_cast<char*>(acc) + from * elem;
      for (const void* in : inputs) {
        reduceInto(target, static_cast<const char*>(in) + from * elem, length, type, kind);
      }
      if (alsoTo) {
        std::memcpy(static_cast<char*>(alsoTo) + from * elem, target, length * elem);
      }
    }
  });
}

void reduceInto(void* acc, const void* in, size_t count, DataType type, ReduceKind kind, HelperPool* helpers) {
  reduceAllInto(acc, {in}, count, type, kind, helpers);
}

} // namespace monarch
