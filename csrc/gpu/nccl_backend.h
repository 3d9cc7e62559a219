#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "gpu/device_backend.h"
#include "gpu/watchdog.h"

namespace monarch::gpu {

// The c10d backend for GPU tensors of one group, over NCCL (RCCL on ROCm).
// The caller's thread checks arguments and enqueues onto a communicator's
// own stream, ordered after the caller's stream by an event; the watchdog
// completes works, times ops out and turns NCCL's asynchronous errors into
// typed failures. After the first failure the backend stays errored: every
// pending and later op fails with that error, until the group is shrunk or
// rebuilt.
class NcclBackend : public c10d::Backend {
 public:
  explicit NcclBackend(DeviceGroup group);
  ~NcclBackend() override;

  const std::string getBackendName() const override;
  void setTimeout(std::chrono::milliseconds timeout) override;
  c10d::ErrorType getError() override;
  void abort() override;
  void shutdown() override;
  // Collectives posted so far (point-to-point ops not counted), as c10d's
  // sequence numbers; they start at zero when the group forms.
  void setSequenceNumberForGroup() override {}
  uint64_t getSequenceNumberForGroup() override {
    return collectives_.load();
  }

  bool supportsShrinking() const override {
    return true;
  }
  c10::intrusive_ptr<c10d::Backend> shrink(
      const std::vector<int64_t>& ranksToExclude,
      int shrinkFlags,
      const c10::intrusive_ptr<c10d::Backend::Options>& optsOverride) override;
  // The backend of `child` (the survivors): communicators shrunk with
  // ncclCommShrink where possible, else made anew on first use.
  c10::intrusive_ptr<NcclBackend> shrinkInto(DeviceGroup child, const std::vector<int64_t>& excluded, int shrinkFlags);

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors, const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(
      std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(
      at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(
      std::vector<std::vector<at::Tensor>>& outputLists, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs, const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(
      std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(
      std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
      const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(
      std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs, const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(
      at::Tensor& output, at::Tensor& input, std::vector<int64_t>& outputSplitSizes,
      std::vector<int64_t>& inputSplitSizes, const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs, const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dstRank, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int srcRank, int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;

  // Why the backend is broken; ok() while healthy.
  Status error();

 private:
  // One op to enqueue: what it is, on which device, and the tensors it
  // touches. `outputs` are the work's result; `keep` (inputs, staging
  // buffers) stays alive and away from the allocator until the op is done.
  struct Op {
    c10d::OpType type;
    const char* name;
    c10::Device device;
    std::vector<at::Tensor> outputs;
    std::vector<at::Tensor> keep;
    std::chrono::milliseconds timeout;
    int peer = -1; // point-to-point: the other rank, on a pair communicator
    bool blockHostOnWait = false;
  };

  // Orders the communicator's stream after the caller's, issues `calls` as
  // one NCCL group, then `after` (copies back into non-contiguous outputs)
  // on the communicator's stream, and hands the work to the watchdog. A
  // failure here fails the work (raised by wait()) and breaks the backend.
  c10::intrusive_ptr<c10d::Work> launch(
      Op op, const std::function<void(GroupCalls&, int peerInComm)>& calls, const std::function<void()>& after = {});
  // The communicator for `device` (the whole group, or the pair with `peer`),
  // made on first use; throws MonarchError when that fails.
  std::shared_ptr<Communicator> communicator(c10::DeviceIndex device, int peer);
  // Breaks the backend: fails the pending ops on `comm` (all when null)
  // and aborts it.
  void fail(const std::shared_ptr<Communicator>& comm, Status status);
  // Names the ranks that had issued fewer GPU ops, through the store.
  void explainTimeout(Status& status);
  std::chrono::milliseconds timeoutFor(std::chrono::milliseconds requested) const;

  DeviceGroup group_;
  std::atomic<int64_t> timeoutMs_;
  std::atomic<uint64_t> seq_{0};
  std::atomic<uint64_t> collectives_{0};
  std::atomic<bool> cancel_{false}; // stops communicator creation on abort
  std::atomic<bool> stopped_{false};

  std::mutex commsMutex_;
  std::map<std::string, std::shared_ptr<Communicator>> comms_;
  std::mutex createMutex_; // one communicator creation at a time
  std::map<std::string, uint64_t> created_; // per kind: names the store keys
  uint64_t shrinks_ = 0;

  std::mutex errorMutex_;
  Status error_;

  Watchdog watchdog_;
};

} // namespace monarch::gpu
