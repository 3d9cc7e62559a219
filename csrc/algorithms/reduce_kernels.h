#pragma once

#include <cstddef>
#include <vector>

#include "common/dtype.h"

namespace monarch {

class HelperPool;

// The reductions' tile: a fraction of a core's L1 data cache, so that the
// tile of acc stays there while every input streams past it.
constexpr size_t kTileBytes = 16 * 1024;

// acc[i] = acc[i] (op) in[i] for `count` elements of `type`. The caller has
// checked isReductionSupported(type, kind).
void reduceInto(void* acc, const void* in, size_t count, DataType type, ReduceKind kind);

// The same, split into slices across `helpers` (null: on the caller alone)
// when the span is large enough to pay for waking them.
void reduceInto(void* acc, const void* in, size_t count, DataType type, ReduceKind kind, HelperPool* helpers);

// acc (op)= each of `inputs` in turn, tile by tile so that a tile of acc
// stays in the core's cache while every input is added to it. A non-null
// `alsoTo` receives a copy of each finished tile. float16 and bfloat16 are
// combined in float and rounded once, after the last input.
void reduceAllInto(
    void* acc, const std::vector<const void*>& inputs, size_t count, DataType type, ReduceKind kind, HelperPool* helpers,
    void* alsoTo = nullptr);

// out = first (op) each of `inputs` in turn, tile by tile as above, on the
// calling thread; `first` is left as it is unless it is `out`. `streaming`:
// each tile is combined in a scratch tile and written to out with
// non-temporal stores (parallel.h's copyBytes), which skip reading out's
// lines before they are overwritten.
void reduceAllFrom(
    void* out, const void* first, const std::vector<const void*>& inputs, size_t count, DataType type, ReduceKind kind,
    bool streaming);

// Each of `outs` = inputs[0] (op) inputs[1] (op) ... in that order, tile by
// tile through a scratch tile: every input of a tile is read before any
// output of it is written, so an output may be one of the inputs. Split
// into slices across `helpers` (null: on the caller alone); `streaming` as
// copySpans'.
void reduceToEach(
    const std::vector<void*>& outs, const std::vector<const void*>& inputs, size_t count, DataType type,
    ReduceKind kind, HelperPool* helpers, bool streaming);

// Whether divideInPlace has `type`: the real floating point types.
bool dividesInPlace(DataType type);

// data[i] /= divisor for `count` elements of `type`, as torch's div_ by an
// integer does (float16 and bfloat16 divided in float and rounded once),
// split across `helpers` (null: on the caller alone).
void divideInPlace(void* data, size_t count, DataType type, int divisor, HelperPool* helpers);

} // namespace monarch
