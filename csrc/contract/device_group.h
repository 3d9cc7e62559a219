#pragma once

// Who a device backend (csrc/gpu/) rendezvous with. The host backend's
// dispatch (backend/device_dispatch.h) derives these for shrunk and split
// groups, and the NCCL/RCCL backend for its own shrinks, so both live here,
// below either.

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace monarch::gpu {

// What a device backend needs to rendezvous: a store private to it, the
// membership and the default op timeout.
struct DeviceGroup {
  c10::intrusive_ptr<c10d::Store> store;
  int rank = 0;
  int size = 0;
  std::string name;
  std::chrono::milliseconds timeout{std::chrono::minutes(30)};
  std::string transport = "auto"; // Options.gpu_transport (see contract/gpu_route.h)
  // This process's address. A group without a store (formed from
  // reconfigure handles) gets one from its rank 0, served there, when the
  // NCCL route needs it.
  std::string storeHost;
};

// The group of the survivors after `excluded` (ranks of `parent`) leave,
// with a store prefix unique to the `generation`-th shrink of the parent.
DeviceGroup shrunkGroup(const DeviceGroup& parent, const std::vector<int64_t>& excluded, uint64_t generation);

} // namespace monarch::gpu
