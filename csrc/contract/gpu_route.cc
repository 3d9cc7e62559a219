#include "contract/gpu_route.h"

#include <c10/util/Exception.h>

#include <cstdio>
#include <cstring>
#include <map>

namespace monarch::gpu {

namespace {

std::string shortUuid(const std::array<uint8_t, 16>& uuid) {
  char text[9];
  std::snprintf(text, sizeof(text), "%02x%02x%02x%02x", uuid[0], uuid[1], uuid[2], uuid[3]);
  return std::string("GPU-") + text;
}

std::string listRanks(const std::vector<int>& ranks) {
  std::string text;
  for (int rank : ranks) {
    text += (text.empty() ? "" : ", ") + std::to_string(rank);
  }
  return "[" + text + "]";
}

} // namespace

GpuTransport parseGpuTransport(const std::string& name) {
  if (name == "auto" || name.empty()) {
    return GpuTransport::kAuto;
  }
  if (name == "nccl") {
    return GpuTransport::kCollectives;
  }
  if (name == "host") {
    return GpuTransport::kHost;
  }
  TORCH_CHECK_VALUE(false, "gpu_transport must be 'auto', 'nccl' or 'host', got '", name, "'");
}

const char* routeName(GpuRoute route) {
  return route == GpuRoute::kCollectives ? "nccl" : "host";
}

void encodeRankDevice(const RankDevice& device, uint8_t* out) {
  std::memcpy(out, device.uuid.data(), device.uuid.size());
  out[16] = device.collectivesLoaded ? 1 : 0;
}

RankDevice decodeRankDevice(const uint8_t* bytes) {
  RankDevice device;
  std::memcpy(device.uuid.data(), bytes, device.uuid.size());
  device.collectivesLoaded = bytes[16] != 0;
  return device;
}

RouteChoice chooseRoute(GpuTransport requested, const std::vector<RankDevice>& ranks) {
  if (requested == GpuTransport::kHost) {
    return {GpuRoute::kHostStaged, "gpu_transport=host was asked for"};
  }
  if (requested == GpuTransport::kCollectives) {
    return {GpuRoute::kCollectives, "gpu_transport=nccl was asked for"};
  }
  std::vector<int> withoutLibrary;
  std::map<std::array<uint8_t, 16>, std::vector<int>> byDevice;
  for (size_t rank = 0; rank < ranks.size(); ++rank) {
    if (!ranks[rank].collectivesLoaded) {
      withoutLibrary.push_back(static_cast<int>(rank));
    }
    byDevice[ranks[rank].uuid].push_back(static_cast<int>(rank));
  }
  if (!withoutLibrary.empty()) {
    return {GpuRoute::kHostStaged, "the collectives library could not be loaded on ranks " + listRanks(withoutLibrary)};
  }
  for (const auto& [uuid, sharing] : byDevice) {
    if (sharing.size() > 1) {
      return {GpuRoute::kHostStaged, "ranks " + listRanks(sharing) + " share " + shortUuid(uuid)};
    }
  }
  return {GpuRoute::kCollectives, "every rank has a GPU of its own"};
}

} // namespace monarch::gpu
