#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "backend/options.h"
#include "backend/work.h"
#include "transport/fabric.h"
#include "transport/group_links.h"

namespace monarch {

// The "monarch" c10d backend for CPU tensors. The caller's thread validates
// arguments and enqueues; one worker thread per group runs collectives in
// sequence-number order over the group's links.
class MonarchBackend : public c10d::Backend {
 public:
  MonarchBackend(
      const c10::intrusive_ptr<c10d::Store>& store,
      int rank,
      int size,
      const std::string& groupName,
      BackendOptions options);
  ~MonarchBackend() override;

  const std::string getBackendName() const override {
    return "monarch";
  }
  void setTimeout(std::chrono::milliseconds timeout) override;

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
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
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
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(
      at::Tensor& output, at::Tensor& input, std::vector<int64_t>& outputSplitSizes,
      std::vector<int64_t>& inputSplitSizes, const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs, const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dstRank, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int srcRank, int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;

  c10d::ErrorType getError() override;
  void abort() override;
  void shutdown() override;

  // The group's error, if it is broken (None-like when healthy).
  Status error();

 private:
  // One collective: what it is, and the code that runs it on the worker.
  struct QueuedOp {
    uint64_t seq;
    OpSignature signature;
    std::function<void(GroupLinks&)> run;
    c10::intrusive_ptr<MonarchWork> work;
    std::shared_ptr<void> keepalive;
    std::chrono::milliseconds timeout;
  };

  // Enqueues a collective. `run` receives the links; `tensors` are kept alive
  // until every transfer that may touch them is done.
  c10::intrusive_ptr<c10d::Work> enqueue(
      c10d::OpType type,
      OpSignature signature,
      std::vector<at::Tensor> outputs,
      std::vector<at::Tensor> tensors,
      std::chrono::milliseconds timeout,
      std::function<void(GroupLinks&)> run);
  c10::intrusive_ptr<c10d::Work> postPointToPoint(
      c10d::OpType type, at::Tensor& tensor, int peer, int tag);
  std::chrono::milliseconds timeoutFor(std::chrono::milliseconds requested) const;
  void workerLoop();
  void runOp(QueuedOp& op);
  // Marks the group broken (first failure wins) and tells the peers.
  void breakGroup(uint64_t seq, const Status& status);
  void stop(const Status& reason);

  const BackendOptions options_;
  std::shared_ptr<Fabric> fabric_;
  std::shared_ptr<CompletionSignal> signal_;
  std::atomic<bool> aborted_{false};
  std::unique_ptr<GroupLinks> links_;
  std::atomic<int64_t> timeoutMs_;

  std::mutex mutex_;
  std::condition_variable queueChanged_;
  std::deque<QueuedOp> queue_;
  uint64_t nextSeq_ = 1;
  bool stopping_ = false;
  Status error_;
  std::thread worker_;
};

} // namespace monarch
