#include "gpu/bindings.h"

#include <pybind11/stl.h>

#include "gpu/device_backend.h"
#include "gpu/route.h"

namespace monarch::gpu {

void bindGpu(pybind11::module_& module) {
  module.def(
      "gpu_report", &gpuReport,
      "(key, value) pairs about the GPU layer: the platform the extension was built for, the collectives library "
      "(NCCL/RCCL) and driver it loaded, and why not where it could not.");
  module.def(
      "choose_gpu_route",
      [](const std::string& transport, const std::vector<std::pair<std::string, bool>>& ranks) {
        std::vector<RankDevice> devices;
        for (const auto& [uuid, loaded] : ranks) {
          TORCH_CHECK_VALUE(uuid.size() == 16, "a GPU UUID has 16 bytes, got ", uuid.size());
          RankDevice device;
          std::copy(uuid.begin(), uuid.end(), device.uuid.begin());
          device.collectivesLoaded = loaded;
          devices.push_back(device);
        }
        RouteChoice choice = chooseRoute(parseGpuTransport(transport), devices);
        return std::make_pair(std::string(routeName(choice.route)), choice.reason);
      },
      pybind11::arg("gpu_transport"), pybind11::arg("ranks"),
      "The route ('nccl' or 'host') and why, for a group whose ranks each report (GPU UUID bytes, NCCL loaded).");
}

} // namespace monarch::gpu
