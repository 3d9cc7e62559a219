#pragma once

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <mutex>
#include <optional>
#include <vector>

#include "gpu/device_backend.h"

namespace monarch {

// The host backend's route to the GPU: ops on CUDA tensors go to a device
// backend (NCCL/RCCL, see csrc/gpu/) that is created on first use from the
// group's store, so groups that never touch a GPU never load NCCL.
class DeviceDispatch {
 public:
  // Where the device backend rendezvous when it is first needed.
  void bind(gpu::DeviceGroup group);
  // The group's membership changed in place (native reconfigure). When the
  // previous members `left` and the rest kept their order
  // (contract/member_change.h), the device backend shrinks into `group`
  // (collective over the survivors: ncclCommShrink where NCCL has it).
  // Otherwise the previous one is aborted, and the next op on CUDA tensors
  // makes one for `group` (a new NCCL communicator, or host-staged over the
  // host group as it is now).
  void rebind(gpu::DeviceGroup group, const std::optional<std::vector<int64_t>>& left);
  // The group's host backend, which owns this dispatch: the host-staged
  // route and the GPU identity exchange run over it.
  void attachHost(c10d::Backend* host) {
    host_ = host;
  }
  // This group is `parent` minus `excluded`: shrinks the parent's device
  // backend if it has one (see shrinkDeviceBackend).
  void inheritShrunk(DeviceDispatch& parent, const std::vector<int64_t>& excluded, int shrinkFlags);
  // This group is the `members` of `parent`, rendezvousing through `store`
  // (the parent's store when null).
  void inheritSplit(
      DeviceDispatch& parent,
      const c10::intrusive_ptr<c10d::Store>& store,
      const std::vector<int>& members,
      const std::string& name);

  // Whether an op on these tensors belongs to the device backend: true as
  // soon as one of them is a CUDA (on ROCm: HIP) tensor.
  template <typename... TensorLists>
  bool wants(const TensorLists&... lists) const {
    return (onDevice(lists) || ...);
  }
  // A barrier goes to the device when the caller named a device for it.
  bool wants(const c10d::BarrierOptions& opts) const;

  // The device backend, created on first use (collective: see
  // createDeviceBackend). In a build without GPU support this raises
  // NotImplementedError.
  c10d::Backend& get();
  // The device backend's name ("monarch-NCCL", "monarch-host-staged"); empty
  // before the group's first op on CUDA tensors.
  std::string backendName();

  // Collectives posted on the device backend so far (0 before its first op).
  uint64_t collectivesPosted();
  void setTimeout(std::chrono::milliseconds timeout);
  c10d::ErrorType error();
  void abort();
  void shutdown();

 private:
  static bool onDevice(const at::Tensor& tensor) {
    return tensor.defined() && tensor.is_cuda();
  }
  static bool onDevice(const std::vector<at::Tensor>& tensors);
  static bool onDevice(const std::vector<std::vector<at::Tensor>>& lists);
  c10::intrusive_ptr<c10d::Backend> current();

  std::mutex createMutex_; // one creation at a time; abort() never takes it
  std::mutex mutex_;
  c10d::Backend* host_ = nullptr;
  gpu::DeviceGroup group_;
  c10::intrusive_ptr<c10d::Backend> backend_;
  uint64_t shrinks_ = 0;
  bool stopped_ = false; // aborted or shut down: a late backend starts aborted
};

} // namespace monarch
