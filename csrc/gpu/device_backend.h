#pragma once

// The seam between the host backend and the GPU layer. Compiled in every
// build: GPU builds define these in device_backend.cc (NCCL/RCCL), the CPU
// build in cpu_stub.cc, which says that it was built without GPU support.

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <string>
#include <utility>
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
  std::string transport = "auto"; // Options.gpu_transport (see route.h)
};

// The group of the survivors after `excluded` (ranks of `parent`) leave,
// with a store prefix unique to the `generation`-th shrink of the parent.
DeviceGroup shrunkGroup(const DeviceGroup& parent, const std::vector<int64_t>& excluded, uint64_t generation);

// The backend for the CUDA tensors of one group, over the route that
// `group.transport` asks for (route.h). "auto" first tells the other ranks
// which GPU this rank uses and whether it has NCCL/RCCL, in one small op on
// `host` (the group's host backend), so it is collective; so is the first
// op of the NCCL route, which makes the communicator. The host-staged route
// runs over `host`, which must outlive it.
c10::intrusive_ptr<c10d::Backend> createDeviceBackend(DeviceGroup group, c10d::Backend& host);

// Shrinks a backend made by createDeviceBackend into `child` (collective over
// the survivors): through ncclCommShrink where the library has it and the
// communicators are healthy, otherwise by building new ones through `child`'s
// store on first use.
c10::intrusive_ptr<c10d::Backend> shrinkDeviceBackend(
    c10d::Backend& parent, DeviceGroup child, const std::vector<int64_t>& excluded, int shrinkFlags);

// Facts for `python -m torch_monarch.doctor`, in display order.
std::vector<std::pair<std::string, std::string>> gpuReport();

} // namespace monarch::gpu
