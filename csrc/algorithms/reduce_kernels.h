#pragma once

#include <cstddef>

#include "common/dtype.h"

namespace monarch {

// acc[i] = acc[i] (op) in[i] for `count` elements of `type`. The caller has
// checked isReductionSupported(type, kind).
void reduceInto(void* acc, const void* in, size_t count, DataType type, ReduceKind kind);

} // namespace monarch
