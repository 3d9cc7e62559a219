#pragma once

#include <ATen/core/ivalue.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "gpu/communicator.h"
#include "gpu/event.h"

namespace monarch::gpu {

// One op on GPU tensors. wait() orders the caller's current stream after the
// op (an event, no host synchronisation); the future completes, and
// isCompleted() turns true, when the GPU has finished it, as seen by the
// backend's watchdog.
class NcclWork : public c10d::Work {
 public:
  NcclWork(
      int rank,
      c10d::OpType opType,
      uint64_t seq,
      const char* name,
      c10::DeviceIndex device,
      std::vector<at::Tensor> outputs,
      bool blockHostOnWait);

  // The op is on `comm`'s stream: records the completion event after it.
  // `keep` (staging buffers, inputs) stays referenced until it completes.
  void launched(std::shared_ptr<Communicator> comm, Clock::time_point deadline, std::vector<at::Tensor> keep);

  bool isCompleted() override;
  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override;
  // Both only order the caller's current stream after the op.
  void synchronize() override;
  void blockCurrentStream() override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;
  std::vector<at::Tensor> result() override;
  uint64_t getSequencenumber() const override;

  // For the watchdog and the backend: "allreduce on cuda:0 (GPU op 7 of rank 1)",
  // composed only when a message needs it.
  std::string description() const;
  const std::shared_ptr<Communicator>& communicator() const {
    return comm_;
  }
  Clock::time_point deadline() const {
    return deadline_;
  }
  // Whether the GPU has passed the op's completion event. Never blocks.
  bool gpuDone();
  // Whether markSuccess/markFailed ran.
  bool finished();
  void markSuccess();
  // No effect once finished: the first outcome stands.
  void markFailed(const Status& status);

 private:
  const int rank_;
  const uint64_t seq_;
  const char* const name_; // a literal
  const c10::DeviceIndex device_;
  const std::vector<at::Tensor> outputs_;
  const bool blockHostOnWait_;
  Event end_;
  std::shared_ptr<Communicator> comm_;
  Clock::time_point deadline_;
  std::vector<at::Tensor> keep_;
  std::atomic<bool> launched_{false};
  std::atomic<bool> decided_{false}; // success or failure was claimed
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

} // namespace monarch::gpu
