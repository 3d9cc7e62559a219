#pragma once

#include <ATen/core/ivalue.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <atomic>
#include <chrono>
#include <vector>

#include "common/status.h"

namespace monarch {

// Completion of one op. Finished by the backend's worker thread (collectives)
// or by the link that moved the data (point-to-point).
class MonarchWork : public c10d::Work {
 public:
  MonarchWork(
      int rank,
      c10d::OpType opType,
      uint64_t seq,
      std::vector<at::Tensor> outputs,
      std::chrono::milliseconds waitBound);

  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;
  std::vector<at::Tensor> result() override;
  int sourceRank() const override;
  uint64_t getSequencenumber() const override;

  void markSuccess(int sourceRank = -1);
  void markFailed(const Status& status);

 private:
  const uint64_t seq_;
  std::vector<at::Tensor> outputs_;
  // How long wait() without a timeout may block: the op's own timeout, plus
  // the time ops queued before it may take. Beyond it wait() raises.
  const std::chrono::milliseconds waitBound_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  int sourceRank_ = -1;
  // Set once finish() has run: what wait() watches before it blocks
  // (c10d::Work's completed_ is read only under its mutex).
  std::atomic<bool> finished_{false};
};

} // namespace monarch
