#pragma once

#include <cstddef>
#include <vector>

#include "common/dtype.h"

namespace monarch {

class HelperPool;

// acc[i] = acc[i] (op) in[i] for `count` elements of `type`. The caller has
// checked isReductionSupported(type, kind).
void reduceInto(void* acc, const void* in, size_t count, DataType type, ReduceKind kind);

// The same, split into slices across `helpers` (null: on the caller alone)
// when the span is large enough to pay for waking them.
void reduceInto(void* acc, const void* in, size_t count, DataType type, ReduceKind kind, HelperPool* helpers);

// acc (op)= each of `inputs` in turn; each slice takes every input while it
// is in cache.
void reduceAllInto(
    void* acc, const std::vector<const void*>& inputs, size_t count, DataType type, ReduceKind kind, HelperPool* helpers);

} // namespace monarch
