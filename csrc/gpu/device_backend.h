#pragma once

// The GPU layer's entry point, the one header of csrc/gpu/ the host backend
// (backend/device_dispatch.h) includes. GPU builds define these in
// device_backend.cc (NCCL/RCCL), the CPU build in cpu_stub.cc, which says
// that it was built without GPU support.

#include <torch/csrc/distributed/c10d/Backend.hpp>

#include <string>
#include <utility>
#include <vector>

#include "contract/device_group.h"

namespace monarch::gpu {

// The backend for the CUDA tensors of one group, over the route that
// `group.transport` asks for (contract/gpu_route.h). "auto" first tells the other ranks
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
