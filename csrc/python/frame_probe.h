#pragma once

#include <pybind11/pybind11.h>

namespace monarch {

// Test hook: feeds raw bytes to a real Connection, as if a peer had sent
// them, and reports what became of one posted receive. Used by the frame
// decoder fuzz tests; never used by the backend.
void bindFrameProbe(pybind11::module_& module);

} // namespace monarch
