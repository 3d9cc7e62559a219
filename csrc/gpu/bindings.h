#pragma once

#include <pybind11/pybind11.h>

namespace monarch::gpu {

// Adds the GPU layer's functions to torch_monarch._C (gpu_report).
void bindGpu(pybind11::module_& module);

} // namespace monarch::gpu
