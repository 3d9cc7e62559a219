#pragma once

// Which route the CUDA tensors of a group take: the collectives library
// (NCCL/RCCL) on the GPU, or host-staged (device to pinned host memory, the
// host algorithms, back to the device). Pure logic, in every build, so that
// the CPU tests cover it.

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace monarch::gpu {

// Options.gpu_transport.
enum class GpuTransport { kAuto, kCollectives, kHost };
// "auto", "nccl" or "host"; anything else raises ValueError.
GpuTransport parseGpuTransport(const std::string& name);

enum class GpuRoute { kCollectives, kHostStaged };
// "nccl" or "host", the names Options.gpu_transport uses.
const char* routeName(GpuRoute route);

// What each rank tells the others before the first op on CUDA tensors.
struct RankDevice {
  std::array<uint8_t, 16> uuid{}; // of the device the rank's GPU ops use
  bool collectivesLoaded = false; // NCCL/RCCL could be loaded there
};
constexpr size_t kRankDeviceBytes = 17;
void encodeRankDevice(const RankDevice& device, uint8_t* out);
RankDevice decodeRankDevice(const uint8_t* bytes);

struct RouteChoice {
  GpuRoute route;
  std::string reason; // for the log and the doctor
};

// "auto" takes the collectives library unless some rank could not load it,
// or two ranks share a GPU (NCCL refuses that: "Duplicate GPU detected");
// "nccl" and "host" are taken as asked. Every rank decides the same from the
// same exchanged facts.
RouteChoice chooseRoute(GpuTransport requested, const std::vector<RankDevice>& ranks);

} // namespace monarch::gpu
