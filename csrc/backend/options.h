#pragma once

#include <chrono>
#include <string>

#include "algorithms/collectives.h"

namespace monarch {

// Backend settings, filled from torch_monarch.Options (which applies the
// MONARCH_* environment overrides) when a group is created.
struct BackendOptions {
  std::chrono::milliseconds timeout{std::chrono::minutes(30)};
  std::string bindAddress; // empty: pick one (see defaultBindAddress)
  std::chrono::milliseconds heartbeatTimeout{std::chrono::seconds(3)};
  bool allowRemoteRead = true; // false: MONARCH_TRANSPORT=tcp
  std::string hostName; // empty: this machine (localHostId)
  // Shared-memory segment of each rank that shares its host with others of
  // its group; 0: none.
  size_t sharedRegionBytes = 8 * 1024 * 1024;
  std::string gpuTransport = "auto"; // route of CUDA tensors: auto, nccl, host (gpu/route.h)
  AlgorithmConfig algorithms;
};

} // namespace monarch
