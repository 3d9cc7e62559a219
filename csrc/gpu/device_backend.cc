// The GPU build's side of device_backend.h: NCCL/RCCL behind the c10d
// interface, and what the doctor reports about the libraries it found.

#include "gpu/device_backend.h"

#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAFunctions.h>
#include <cuda_runtime_api.h>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <cstring>

#include "common/logging.h"
#include "gpu/compat.h"
#include "gpu/driver_api.h"
#include "gpu/host_staged_backend.h"
#include "gpu/nccl_backend.h"
#include "gpu/nccl_library.h"
#include "contract/gpu_route.h"

namespace monarch::gpu {

namespace {

// Every rank's GPU identity and library, gathered over the host group: a
// dead or stuck peer fails it with the host path's typed errors and bounds.
std::vector<RankDevice> exchangeDevices(c10d::Backend& host, bool collectivesLoaded) {
  RankDevice mine;
  mine.collectivesLoaded = collectivesLoaded;
  cudaDeviceProp properties{};
  C10_CUDA_CHECK(cudaGetDeviceProperties(&properties, c10::cuda::current_device()));
  std::memcpy(mine.uuid.data(), properties.uuid.bytes, mine.uuid.size());
  at::Tensor local = at::empty({static_cast<int64_t>(kRankDeviceBytes)}, at::kByte);
  encodeRankDevice(mine, local.data_ptr<uint8_t>());
  at::Tensor all = at::empty({static_cast<int64_t>(kRankDeviceBytes) * host.getSize()}, at::kByte);
  host._allgather_base(all, local, c10d::AllgatherOptions())->wait();
  std::vector<RankDevice> ranks;
  for (int rank = 0; rank < host.getSize(); ++rank) {
    ranks.push_back(decodeRankDevice(all.data_ptr<uint8_t>() + rank * kRankDeviceBytes));
  }
  return ranks;
}

// The store of a group that has none (formed from reconfigure handles): rank
// 0 serves one at its own address and tells the others where, over the host
// group, so that it is as collective as the device exchange before it.
c10::intrusive_ptr<c10d::Store> storeServedByRankZero(const DeviceGroup& group, c10d::Backend& host) {
  constexpr int64_t kAddressBytes = 64;
  c10d::TCPStoreOptions options;
  options.port = 0;
  options.waitWorkers = false;
  options.timeout = group.timeout;
  c10::intrusive_ptr<c10d::Store> served;
  at::Tensor address = at::zeros({kAddressBytes}, at::kByte);
  if (group.rank == 0) {
    options.isServer = true;
    auto store = c10::make_intrusive<c10d::TCPStore>(group.storeHost, options);
    std::string text = group.storeHost + ":" + std::to_string(store->getPort());
    TORCH_CHECK(static_cast<int64_t>(text.size()) < kAddressBytes, "store address too long: ", text);
    std::memcpy(address.data_ptr<uint8_t>(), text.data(), text.size());
    served = store;
  }
  std::vector<at::Tensor> tensors{address};
  host.broadcast(tensors, c10d::BroadcastOptions())->wait();
  if (served) {
    return served;
  }
  std::string text(reinterpret_cast<const char*>(address.data_ptr<uint8_t>()));
  auto colon = text.rfind(':');
  TORCH_CHECK(colon != std::string::npos, "rank 0 sent a malformed store address: '", text, "'");
  options.port = static_cast<uint16_t>(std::stoi(text.substr(colon + 1)));
  return c10::make_intrusive<c10d::TCPStore>(text.substr(0, colon), options);
}

} // namespace

c10::intrusive_ptr<c10d::Backend> createDeviceBackend(DeviceGroup group, c10d::Backend& host) {
  const auto& library = NcclLibrary::get();
  GpuTransport requested = parseGpuTransport(group.transport);
  std::vector<RankDevice> ranks;
  if (requested == GpuTransport::kAuto) {
    ranks = exchangeDevices(host, library.available());
  }
  RouteChoice choice = chooseRoute(requested, ranks);
  MONARCH_LOG(kInfo) << "rank " << group.rank << ": GPU tensors of group '" << group.name << "' go "
                     << (choice.route == GpuRoute::kHostStaged ? "host-staged" : kCollectivesName) << ": "
                     << choice.reason;
  if (choice.route == GpuRoute::kHostStaged) {
    return c10::make_intrusive<HostStagedBackend>(host, group.timeout);
  }
  if (!library.available()) {
    C10_THROW_ERROR(
        DistBackendError,
        std::string("GPU tensors need ") + kCollectivesName + ", which could not be loaded: " + library.error() +
            ". Install it (" + kCollectivesInstallHint + ") or set MONARCH_NCCL_LIBRARY to its path.");
  }
  if (!group.store) {
    group.store = storeServedByRankZero(group, host);
  }
  return c10::make_intrusive<NcclBackend>(std::move(group));
}

c10::intrusive_ptr<c10d::Backend> shrinkDeviceBackend(
    c10d::Backend& parent, DeviceGroup child, const std::vector<int64_t>& excluded, int shrinkFlags) {
  auto* nccl = dynamic_cast<NcclBackend*>(&parent);
  if (nccl == nullptr) {
    return {}; // host-staged: the survivors' group makes its own on first use
  }
  return nccl->shrinkInto(std::move(child), excluded, shrinkFlags);
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
