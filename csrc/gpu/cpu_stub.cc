// The CPU build's side of device_backend.h: there is no GPU layer, and a GPU
// tensor says so instead of failing somewhere deeper.

#include <c10/util/Exception.h>

#include "gpu/device_backend.h"

namespace monarch::gpu {

namespace {

constexpr const char* kWithoutGpu =
    "torch_monarch was built without GPU support (platform cpu), so GPU tensors cannot be used; rebuild it with "
    "GPU_PLATFORM=cuda or GPU_PLATFORM=rocm (see `python -m torch_monarch.doctor`)";

} // namespace

c10::intrusive_ptr<c10d::Backend> createDeviceBackend(DeviceGroup /*group*/, c10d::Backend& /*host*/) {
  TORCH_CHECK_NOT_IMPLEMENTED(false, kWithoutGpu);
}

c10::intrusive_ptr<c10d::Backend> shrinkDeviceBackend(
    c10d::Backend& /*parent*/, DeviceGroup /*child*/, const std::vector<int64_t>& /*excluded*/, int /*shrinkFlags*/) {
  TORCH_CHECK_NOT_IMPLEMENTED(false, kWithoutGpu);
}

std::vector<std::pair<std::string, std::string>> gpuReport() {
  return {
      {"platform", "cpu"},
      {"collectives", "-"},
      {"collectives_library", "not found"},
      {"collectives_version", "-"},
      {"collectives_shrink", "-"},
      {"collectives_error", "built without GPU support"},
      {"driver_library", "not found"},
      {"driver_version", "-1"},
      {"driver_devices", "-1"},
      {"driver_error", "built without GPU support"},
      {"dmabuf_export", "no"},
  };
}

} // namespace monarch::gpu
