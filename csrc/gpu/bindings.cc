#include "gpu/bindings.h"

#include <pybind11/stl.h>

#include "gpu/device_backend.h"

namespace monarch::gpu {

void bindGpu(pybind11::module_& module) {
  module.def(
      "gpu_report", &gpuReport,
      "(key, value) pairs about the GPU layer: the platform the extension was built for, the collectives library "
      "(NCCL/RCCL) and driver it loaded, and why not where it could not.");
}

} // namespace monarch::gpu
