#pragma once

#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

namespace monarch {

// The name under which torch.profiler shows an op of this backend
// ("monarch:all_reduce", ...), in the style of Gloo's "gloo:all_reduce".
// c10d::Work records the span from its construction to finish() when it is
// given this title and a profiler is active.
const char* profilingTitle(c10d::OpType type);

} // namespace monarch
