#include "gpu/nccl_work.h"

#include <c10/cuda/CUDAStream.h>

#include <thread>

#include "contract/errors.h"
#include "contract/profiling.h"

namespace monarch::gpu {

NcclWork::NcclWork(
    int rank,
    c10d::OpType opType,
    uint64_t seq,
    const char* name,
    c10::DeviceIndex device,
    std::vector<at::Tensor> outputs,
    bool blockHostOnWait)
    : c10d::Work(rank, opType, profilingTitle(opType), outputs),
      rank_(rank),
      seq_(seq),
      name_(name),
      device_(device),
      outputs_(std::move(outputs)),
      blockHostOnWait_(blockHostOnWait),
      // A plain future, completed by the watchdog once the GPU is done, so
      // its callbacks and value() need no stream synchronisation.
      future_(c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))) {}

void NcclWork::launched(std::shared_ptr<Communicator> comm, Clock::time_point deadline, std::vector<at::Tensor> keep) {
  end_.record(comm->stream());
  comm_ = std::move(comm);
  deadline_ = deadline;
  keep_ = std::move(keep);
  launched_ = true;
}

std::string NcclWork::description() const {
  return std::string(name_) + " on cuda:" + std::to_string(static_cast<int>(device_)) + " (GPU op " +
      std::to_string(seq_) + " of rank " + std::to_string(rank_) + ")";
}

bool NcclWork::gpuDone() {
  return launched_.load() && end_.query();
}

bool NcclWork::finished() {
  return decided_.load();
}

bool NcclWork::isCompleted() {
  {
    std::lock_guard<std::mutex> guard(mutex_);
    if (completed_) {
      return true;
    }
  }
  return gpuDone();
}

bool NcclWork::wait(std::chrono::milliseconds timeout) {
  {
    std::lock_guard<std::mutex> guard(mutex_);
    if (exception_) {
      std::rethrow_exception(exception_);
    }
  }
  // The GPU-side wait: the caller's stream resumes after the op.
  blockCurrentStream();
  if (!blockHostOnWait_ && timeout == kNoTimeout) {
    return true;
  }
  // A barrier, or an explicit timeout: the host waits for the GPU too.
  auto limit = timeout == kNoTimeout ? deadline_ + std::chrono::seconds(1) : Clock::now() + timeout;
  for (int round = 0;; ++round) {
    bool done = gpuDone();
    {
      // Failures are recorded before an abort lets a stuck op's event pass.
      std::lock_guard<std::mutex> guard(mutex_);
      if (exception_) {
        std::rethrow_exception(exception_);
      }
      if (done || completed_) {
        return true;
      }
    }
    if (Clock::now() > limit) {
      throw MonarchError(
          ErrorKind::kTimeout, {},
          "wait(): Timed out on " + description() + ": the GPU has not finished it; the op is still pending");
    }
    if (round < 100) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(round < 1000 ? 20 : 500));
    }
  }
}

void NcclWork::synchronize() {
  blockCurrentStream();
}

void NcclWork::blockCurrentStream() {
  if (launched_.load()) {
    end_.block(c10::cuda::getCurrentCUDAStream(device_));
  }
}

c10::intrusive_ptr<c10::ivalue::Future> NcclWork::getFuture() {
  return future_;
}

std::vector<at::Tensor> NcclWork::result() {
  return outputs_;
}

uint64_t NcclWork::getSequencenumber() const {
  return seq_;
}

void NcclWork::markSuccess() {
  if (decided_.exchange(true)) {
    return;
  }
  finish();
  keep_.clear();
  future_->markCompleted(c10::IValue(outputs_));
}

void NcclWork::markFailed(const Status& status) {
  if (decided_.exchange(true)) {
    return;
  }
  auto error = makeError(status);
  finish(error);
  future_->setError(error);
}

} // namespace monarch::gpu
