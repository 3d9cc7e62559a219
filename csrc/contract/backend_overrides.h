#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>

// The c10d::Backend overrides that torch_monarch's backends share, declared
// once: a backend class names the macro in its public section and defines
// each function in its .cc.
//
// MONARCH_C10D_OPS_OVERRIDES: the collectives and point-to-point ops that
// every backend implements (the host backend, NCCL, host-staged). Ops only
// some backends have (allreduce_sparse) are declared by those.
#define MONARCH_C10D_OPS_OVERRIDES                                                                          \
  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors, const c10d::BroadcastOptions& opts) \
      override;                                                                                             \
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) \
      override;                                                                                             \
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(                                                       \
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override;              \
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts)  \
      override;                                                                                             \
  c10::intrusive_ptr<c10d::Work> allgather(                                                                 \
      std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,                       \
      const c10d::AllgatherOptions& opts) override;                                                         \
  c10::intrusive_ptr<c10d::Work> _allgather_base(                                                           \
      at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions& opts) override;                  \
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(                                                       \
      std::vector<std::vector<at::Tensor>>& outputLists, std::vector<at::Tensor>& inputs,                   \
      const c10d::AllgatherOptions& opts) override;                                                         \
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(                                           \
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs, const c10d::AllgatherOptions& opts) \
      override;                                                                                             \
  c10::intrusive_ptr<c10d::Work> gather(                                                                    \
      std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,                       \
      const c10d::GatherOptions& opts) override;                                                            \
  c10::intrusive_ptr<c10d::Work> scatter(                                                                   \
      std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,                       \
      const c10d::ScatterOptions& opts) override;                                                           \
  c10::intrusive_ptr<c10d::Work> reduce_scatter(                                                            \
      std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,                       \
      const c10d::ReduceScatterOptions& opts) override;                                                     \
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(                                                      \
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override;              \
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(                                           \
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,                                    \
      const c10d::ReduceScatterOptions& opts) override;                                                     \
  c10::intrusive_ptr<c10d::Work> alltoall_base(                                                             \
      at::Tensor& output, at::Tensor& input, std::vector<int64_t>& outputSplitSizes,                        \
      std::vector<int64_t>& inputSplitSizes, const c10d::AllToAllOptions& opts) override;                   \
  c10::intrusive_ptr<c10d::Work> alltoall(                                                                  \
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs, const c10d::AllToAllOptions& opts) \
      override;                                                                                             \
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dstRank, int tag) override;     \
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int srcRank, int tag) override;     \
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;         \
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;

// MONARCH_C10D_SHRINK_OVERRIDES: shrinking a group past excluded ranks
// (ProcessGroup.shrink), which the host and NCCL backends support.
#define MONARCH_C10D_SHRINK_OVERRIDES                                           \
  bool supportsShrinking() const override {                                     \
    return true;                                                                \
  }                                                                             \
  c10::intrusive_ptr<c10d::Backend> shrink(                                     \
      const std::vector<int64_t>& ranksToExclude,                               \
      int shrinkFlags,                                                          \
      const c10::intrusive_ptr<c10d::Backend::Options>& optsOverride) override;

// MONARCH_C10D_RECONFIGURE_OVERRIDES: c10d's fault-tolerance contract
// (torch 2.14+, C10D_BACKEND_HAS_RECONFIGURE): a handle naming this process's
// endpoint, and reconfigure(), which forms the group from handles in place.
// Empty with an older torch, whose Backend has none of it; code that needs
// the contract tests MONARCH_NATIVE_RECONFIGURE.
#ifdef C10D_BACKEND_HAS_RECONFIGURE
#define MONARCH_NATIVE_RECONFIGURE 1
#define MONARCH_C10D_RECONFIGURE_OVERRIDES                                    \
  bool supportsReconfigure() const override;                                  \
  c10d::ReconfigureHandle get_reconfigure_handle() const override;            \
  c10::intrusive_ptr<c10d::Work> reconfigure(const c10d::ReconfigureOptions& opts) override;
#else
#define MONARCH_C10D_RECONFIGURE_OVERRIDES
#endif
