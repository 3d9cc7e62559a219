// The GPU build's side of device_backend.h: NCCL/RCCL behind the c10d
// interface, and what the doctor reports about the libraries it found.

#include "gpu/device_backend.h"

#include "gpu/compat.h"
#include "gpu/driver_api.h"
#include "gpu/nccl_backend.h"
#include "gpu/nccl_library.h"

namespace monarch::gpu {

c10::intrusive_ptr<c10d::Backend> createDeviceBackend(DeviceGroup group) {
  const auto& library = NcclLibrary::get();
  if (!library.available()) {
    C10_THROW_ERROR(
        DistBackendError,
        std::string("GPU tensors need ") + kCollectivesName + ", which could not be loaded: " + library.error() +
            ". Install it (" + kCollectivesInstallHint + ") or set MONARCH_NCCL_LIBRARY to its path.");
  }
  return c10::make_intrusive<NcclBackend>(std::move(group));
}

c10::intrusive_ptr<c10d::Backend> shrinkDeviceBackend(
    c10d::Backend& parent, DeviceGroup child, const std::vector<int64_t>& excluded, int shrinkFlags) {
  // Only createDeviceBackend makes the parents this sees.
  return static_cast<NcclBackend&>(parent).shrinkInto(std::move(child), excluded, shrinkFlags);
}

std::vector<std::pair<std::string, std::string>> gpuReport() {
  const auto& library = NcclLibrary::get();
  const auto& driver = Driver::get();
  std::vector<std::pair<std::string, std::string>> report{
      {"platform", kPlatform},
      {"collectives", kCollectivesName},
      {"collectives_library", library.path().empty() ? "not found" : library.path()},
      {"collectives_version", library.versionCode() > 0 ? library.version() : "-"},
      {"collectives_shrink", library.hasShrink() ? "ncclCommShrink" : "rebuild"},
      {"collectives_error", library.error()},
      {"driver_library", driver.path().empty() ? "not found" : driver.path()},
      {"driver_version", std::to_string(driver.version())},
      {"driver_devices", std::to_string(driver.deviceCount())},
      {"driver_error", driver.available() ? driver.deviceError() : driver.error()},
      {"dmabuf_export", driver.api().memGetHandleForAddressRange != nullptr ? "yes" : "no"},
  };
  return report;
}

} // namespace monarch::gpu
