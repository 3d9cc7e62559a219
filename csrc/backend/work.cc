#include "backend/work.h"

#include "contract/errors.h"
#include "contract/profiling.h"
#include "common/spin.h"

namespace monarch {

MonarchWork::MonarchWork(
    int rank,
    c10d::OpType opType,
    uint64_t seq,
    std::vector<at::Tensor> outputs,
    std::chrono::milliseconds waitBound)
    : c10d::Work(rank, opType, profilingTitle(opType), outputs),
      seq_(seq),
      outputs_(std::move(outputs)),
      waitBound_(waitBound),
      future_(c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))) {}

bool MonarchWork::wait(std::chrono::milliseconds timeout) {
  // A small op is done within a spin: the caller then need not be woken.
  spinUntil([this] { return finished_.load(std::memory_order_acquire); });
  std::unique_lock<std::mutex> lock(mutex_);
  auto bound = timeout == kNoTimeout ? waitBound_ : timeout;
  if (!cv_.wait_for(lock, bound, [&] { return completed_; })) {
    throw MonarchError(
        ErrorKind::kTimeout, {},
        "wait(): Timed out after " + std::to_string(bound.count()) + " ms on op with sequence number " +
            std::to_string(seq_) + "; the op is still pending");
  }
  if (exception_) {
    std::rethrow_exception(exception_);
  }
  return true;
}

c10::intrusive_ptr<c10::ivalue::Future> MonarchWork::getFuture() {
  return future_;
}

std::vector<at::Tensor> MonarchWork::result() {
  return outputs_;
}

int MonarchWork::sourceRank() const {
  std::lock_guard<std::mutex> guard(mutex_);
  return sourceRank_;
}

uint64_t MonarchWork::getSequencenumber() const {
  return seq_;
}

void MonarchWork::markSuccess(int sourceRank) {
  {
    std::lock_guard<std::mutex> guard(mutex_);
    sourceRank_ = sourceRank;
  }
  // The future completes before wait() returns (as in ProcessGroupGloo):
  // callers such as TorchFT's _ManagedWork chain then() right after wait()
  // and expect it to run at once.
  future_->markCompleted(c10::IValue(outputs_));
  finish();
  finished_.store(true, std::memory_order_release);
}

void MonarchWork::markFailed(const Status& status) {
  auto error = makeError(status);
  future_->setError(error);
  finish(error);
  finished_.store(true, std::memory_order_release);
}

} // namespace monarch
