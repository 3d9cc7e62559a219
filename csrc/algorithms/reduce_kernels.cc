#include "algorithms/reduce_kernels.h"

#include <c10/util/ArrayRef.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <c10/util/bit_cast.h>

#include <algorithm>
#include <complex>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <type_traits>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "algorithms/parallel.h"

namespace monarch {

namespace {

// Plain loops over __restrict pointers, which the compiler vectorises. The
// input may be of a narrower type `In` that converts to T on the way in (a
// bfloat16 input into a float accumulator).
template <typename T, typename In = T, typename Op>
void combine(void* accRaw, const void* inRaw, size_t count, Op op) {
  T* __restrict acc = static_cast<T*>(accRaw);
  const In* __restrict in = static_cast<const In*>(inRaw);
  for (size_t i = 0; i < count; ++i) {
    acc[i] = op(acc[i], static_cast<T>(in[i]));
  }
}

template <typename T, typename In = T>
void reduceArithmetic(void* acc, const void* in, size_t count, ReduceKind kind) {
  switch (kind) {
    case ReduceKind::kSum:
      return combine<T, In>(acc, in, count, [](T a, T b) { return static_cast<T>(a + b); });
    case ReduceKind::kProduct:
      return combine<T, In>(acc, in, count, [](T a, T b) { return static_cast<T>(a * b); });
    case ReduceKind::kMin:
      return combine<T, In>(acc, in, count, [](T a, T b) { return b < a ? b : a; });
    case ReduceKind::kMax:
      return combine<T, In>(acc, in, count, [](T a, T b) { return a < b ? b : a; });
    default:
      throw std::invalid_argument("bitwise reduction on a floating point type");
  }
}

template <typename T, typename In = T>
void reduceFloat(void* acc, const void* in, size_t count, ReduceKind kind) {
  // NaN propagates through MIN and MAX, as torch.minimum/maximum do.
  switch (kind) {
    case ReduceKind::kMin:
      return combine<T, In>(acc, in, count, [](T a, T b) { return (b < a || b != b) ? b : a; });
    case ReduceKind::kMax:
      return combine<T, In>(acc, in, count, [](T a, T b) { return (a < b || b != b) ? b : a; });
    default:
      return reduceArithmetic<T, In>(acc, in, count, kind);
  }
}

// Half types are reduced in float: every input is combined into a float
// accumulator with the float kernels, a tile at a time, and the result is
// rounded to the half type once, at the end. Conversions run in vector
// registers: bfloat16 by integer shifts as it is read, float16 widened a tile
// ahead with the F16C instructions where the CPU has them.

// Elements per tile: the float accumulator and the widened input (8 KiB
// each) stay in L1 while the inputs go by.
constexpr size_t kHalfTile = 2048;

void widen(float* out, const c10::BFloat16* in, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    out[i] = c10::bit_cast<float>(static_cast<uint32_t>(in[i].x) << 16);
  }
}

// Round to nearest even, NaN to the canonical quiet NaN: c10::BFloat16(float)
// without a branch, so that the loop vectorises.
void narrow(c10::BFloat16* out, const float* in, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    const uint32_t bits = c10::bit_cast<uint32_t>(in[i]);
    const uint32_t rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
    out[i].x = in[i] != in[i] ? uint16_t{0x7fc0} : static_cast<uint16_t>(rounded);
  }
}

#if defined(__x86_64__)
__attribute__((target("avx,f16c"))) void widenWithF16c(float* out, const c10::Half* in, size_t count) {
  size_t i = 0;
  for (; i + 8 <= count; i += 8) {
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i))));
  }
  for (; i < count; ++i) {
    out[i] = _cvtsh_ss(in[i].x);
  }
}

__attribute__((target("avx,f16c"))) void narrowWithF16c(c10::Half* out, const float* in, size_t count) {
  size_t i = 0;
  for (; i + 8 <= count; i += 8) {
    _mm_storeu_si128(
        reinterpret_cast<__m128i*>(out + i), _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT));
  }
  for (; i < count; ++i) {
    out[i].x = _cvtss_sh(in[i], _MM_FROUND_TO_NEAREST_INT);
  }
}

bool hasF16c() {
  static const bool has = __builtin_cpu_supports("f16c");
  return has;
}
#endif

void widen(float* out, const c10::Half* in, size_t count) {
#if defined(__x86_64__)
  if (hasF16c()) {
    return widenWithF16c(out, in, count);
  }
#endif
  for (size_t i = 0; i < count; ++i) {
    out[i] = static_cast<float>(in[i]);
  }
}

void narrow(c10::Half* out, const float* in, size_t count) {
#if defined(__x86_64__)
  if (hasF16c()) {
    return narrowWithF16c(out, in, count);
  }
#endif
  for (size_t i = 0; i < count; ++i) {
    out[i] = c10::Half(in[i]);
  }
}

// acc (op)= inputs[j][offset...] for every j, in float, rounded once.
template <typename Half>
void reduceHalves(void* accRaw, c10::ArrayRef<const void*> inputs, size_t offset, size_t count, ReduceKind kind) {
  Half* acc = static_cast<Half*>(accRaw);
  float sum[kHalfTile];
  for (size_t from = 0; from < count; from += kHalfTile) {
    const size_t length = std::min(kHalfTile, count - from);
    widen(sum, acc + from, length);
    for (const void* in : inputs) {
      const Half* tile = static_cast<const Half*>(in) + offset + from;
      if constexpr (std::is_same_v<Half, c10::BFloat16>) {
        reduceFloat<float, c10::BFloat16>(sum, tile, length, kind); // widened as it is read: a shift
      } else {
        float next[kHalfTile];
        widen(next, tile, length);
        reduceFloat<float>(sum, next, length, kind);
      }
    }
    narrow(acc + from, sum, length);
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

template <typename T>
void divideNative(void* dataRaw, size_t count, T divisor) {
  T* __restrict data = static_cast<T*>(dataRaw);
  for (size_t i = 0; i < count; ++i) {
    data[i] = data[i] / divisor;
  }
}

template <typename Half>
void divideHalves(void* dataRaw, size_t count, float divisor) {
  Half* data = static_cast<Half*>(dataRaw);
  float wide[kHalfTile];
  for (size_t from = 0; from < count; from += kHalfTile) {
    const size_t length = std::min(kHalfTile, count - from);
    widen(wide, data + from, length);
    divideNative<float>(wide, length, divisor);
    narrow(data + from, wide, length);
  }
}

// A sum of several inputs of a native floating point type, up to four in
// one pass over acc, in the order one pass per input adds them (the same
// result to the bit): reading four streams at once made the pooled
// reduce-scatter of 16 / 64 MB at world 8 1.23x / 1.40x faster on the
// 16-core test machine, the pooled allreduce 1.02x / 1.28x, and the
// reduce-scatter through the slots at 16 MB 1.2-1.4x (one thread per rank;
// benchmarks/RESULTS.md, "four inputs a pass").
template <typename T>
void sumInGroups(void* accRaw, c10::ArrayRef<const void*> inputs, size_t offset, size_t count) {
  T* __restrict acc = static_cast<T*>(accRaw);
  for (size_t j = 0; j < inputs.size();) {
    const size_t group = std::min<size_t>(4, inputs.size() - j);
    auto at = [&](size_t k) { return static_cast<const T*>(inputs[j + k]) + offset; };
    if (group == 4) {
      const T* __restrict a = at(0);
      const T* __restrict b = at(1);
      const T* __restrict c = at(2);
      const T* __restrict d = at(3);
      for (size_t i = 0; i < count; ++i) {
        acc[i] = (((acc[i] + a[i]) + b[i]) + c[i]) + d[i];
      }
    } else if (group == 3) {
      const T* __restrict a = at(0);
      const T* __restrict b = at(1);
      const T* __restrict c = at(2);
      for (size_t i = 0; i < count; ++i) {
        acc[i] = ((acc[i] + a[i]) + b[i]) + c[i];
      }
    } else if (group == 2) {
      const T* __restrict a = at(0);
      const T* __restrict b = at(1);
      for (size_t i = 0; i < count; ++i) {
        acc[i] = (acc[i] + a[i]) + b[i];
      }
    } else {
      combine<T>(acc, at(0), count, [](T x, T y) { return x + y; });
    }
    j += group;
  }
}

// The native (non-half) types, one input.
void reduceNative(void* acc, const void* in, size_t count, DataType type, ReduceKind kind) {
  switch (type) {
    case DataType::kFloat32:
      return reduceFloat<float>(acc, in, count, kind);
    case DataType::kFloat64:
      return reduceFloat<double>(acc, in, count, kind);
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
    case DataType::kFloat16:
    case DataType::kBFloat16:
    case DataType::kCount:
      break;
  }
  throw std::invalid_argument("reduction on an unknown dtype");
}

// acc (op)= inputs[j] + offset elements, for every j in turn.
void reduceTile(
    void* acc, c10::ArrayRef<const void*> inputs, size_t offset, size_t count, DataType type, ReduceKind kind) {
  if (type == DataType::kFloat16) {
    return reduceHalves<c10::Half>(acc, inputs, offset, count, kind);
  }
  if (type == DataType::kBFloat16) {
    return reduceHalves<c10::BFloat16>(acc, inputs, offset, count, kind);
  }
  if (kind == ReduceKind::kSum && type == DataType::kFloat32) {
    return sumInGroups<float>(acc, inputs, offset, count);
  }
  if (kind == ReduceKind::kSum && type == DataType::kFloat64) {
    return sumInGroups<double>(acc, inputs, offset, count);
  }
  const size_t elem = elementSize(type);
  for (const void* in : inputs) {
    reduceNative(acc, static_cast<const char*>(in) + offset * elem, count, type, kind);
  }
}

// reduceAllInto and reduceAllFrom: with `first`, each tile of acc is first
// copied from it, while the tile is brought into the cache anyway. With
// `streaming` (and `first`), each tile is combined in a scratch tile and
// stored to acc with non-temporal stores.
void reduceTiles(
    void* acc, const void* first, const std::vector<const void*>& inputs, size_t count, DataType type, ReduceKind kind,
    HelperPool* helpers, void* alsoTo, bool streaming) {
  const size_t elem = elementSize(type);
  const size_t tile = kTileBytes / elem;
  forEachSlice(count, elem, helpers, [&](size_t begin, size_t end) {
    alignas(64) char scratch[kTileBytes];
    for (size_t from = begin; from < end; from += tile) {
      const size_t length = std::min(tile, end - from);
      char* destination = static_cast<char*>(acc) + from * elem;
      char* target = streaming ? scratch : destination;
      if (first) {
        std::memcpy(target, static_cast<const char*>(first) + from * elem, length * elem);
      }
      reduceTile(target, inputs, from, length, type, kind);
      if (streaming) {
        copyBytes(destination, scratch, length * elem, /*streaming=*/true);
      }
      if (alsoTo) {
        std::memcpy(static_cast<char*>(alsoTo) + from * elem, target, length * elem);
      }
    }
  });
}

} // namespace

void reduceToEach(
    const std::vector<void*>& outs, const std::vector<const void*>& inputs, size_t count, DataType type,
    ReduceKind kind, HelperPool* helpers, bool streaming) {
  const size_t elem = elementSize(type);
  const size_t tile = kTileBytes / elem;
  const c10::ArrayRef<const void*> rest(inputs.data() + 1, inputs.size() - 1);
  forEachSlice(count, elem, helpers, [&](size_t begin, size_t end) {
    alignas(64) char scratch[kTileBytes];
    for (size_t from = begin; from < end; from += tile) {
      const size_t length = std::min(tile, end - from);
      std::memcpy(scratch, static_cast<const char*>(inputs[0]) + from * elem, length * elem);
      reduceTile(scratch, rest, from, length, type, kind);
      for (void* out : outs) {
        copyBytes(static_cast<char*>(out) + from * elem, scratch, length * elem, streaming);
      }
    }
  });
}

void reduceInto(void* acc, const void* in, size_t count, DataType type, ReduceKind kind) {
  reduceTile(acc, {in}, 0, count, type, kind);
}

void reduceAllInto(
    void* acc, const std::vector<const void*>& inputs, size_t count, DataType type, ReduceKind kind, HelperPool* helpers,
    void* alsoTo) {
  reduceTiles(acc, nullptr, inputs, count, type, kind, helpers, alsoTo, /*streaming=*/false);
}

void reduceAllFrom(
    void* out, const void* first, const std::vector<const void*>& inputs, size_t count, DataType type, ReduceKind kind,
    bool streaming) {
  const bool inPlace = first == out;
  reduceTiles(out, inPlace ? nullptr : first, inputs, count, type, kind, nullptr, nullptr, streaming && !inPlace);
}

void reduceInto(void* acc, const void* in, size_t count, DataType type, ReduceKind kind, HelperPool* helpers) {
  reduceAllInto(acc, {in}, count, type, kind, helpers);
}

bool dividesInPlace(DataType type) {
  return type == DataType::kFloat32 || type == DataType::kFloat64 || type == DataType::kFloat16 ||
      type == DataType::kBFloat16;
}

void divideInPlace(void* data, size_t count, DataType type, int divisor, HelperPool* helpers) {
  if (!dividesInPlace(type)) {
    throw std::invalid_argument("division in place of a type other than a real floating point one");
  }
  const size_t elem = elementSize(type);
  forEachSlice(count, elem, helpers, [&](size_t begin, size_t end) {
    void* slice = static_cast<char*>(data) + begin * elem;
    const size_t length = end - begin;
    switch (type) {
      case DataType::kFloat32:
        return divideNative<float>(slice, length, static_cast<float>(divisor));
      case DataType::kFloat64:
        return divideNative<double>(slice, length, static_cast<double>(divisor));
      case DataType::kFloat16:
        return divideHalves<c10::Half>(slice, length, static_cast<float>(divisor));
      default:
        return divideHalves<c10::BFloat16>(slice, length, static_cast<float>(divisor));
    }
  });
}

} // namespace monarch
