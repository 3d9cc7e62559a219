#include "gpu/host_staging.h"

#include <ATen/core/ivalue.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>

#include <mutex>
#include <thread>

#include "contract/errors.h"

namespace monarch::gpu {

namespace {

// Keeps the caching allocator from reusing a CUDA tensor's memory before the
// staging stream is done with it.
void recordStream(const at::Tensor& tensor, const c10::cuda::CUDAStream& stream) {
  if (tensor.is_cuda() && tensor.storage().data_ptr().get() != nullptr) {
    c10::cuda::CUDACachingAllocator::recordStream(tensor.storage().data_ptr(), stream);
  }
}

// Polls `event` until it passes, the deadline or an abort. A CUDA error in
// the work queued before the op (an illegal address in the step, say) is
// this rank's failure: the peers learn it as such.
Status waitForEvent(Event& event, int rank, std::chrono::steady_clock::time_point deadline, const std::atomic<bool>& aborted) {
  for (int round = 0;; ++round) {
    try {
      if (event.query()) {
        return Status();
      }
    } catch (const c10::Error& e) {
      return Status::error(
          ErrorKind::kPeerFailure, {rank},
          "rank " + std::to_string(rank) + " hit a GPU error before copying the op's tensors to the host: " +
              e.what_without_backtrace());
    }
    if (aborted.load()) {
      return Status::error(ErrorKind::kAborted, {}, "aborted while the op's tensors were being copied to the host");
    }
    if (std::chrono::steady_clock::now() > deadline) {
      return Status::error(
          ErrorKind::kTimeout, {rank},
          "rank " + std::to_string(rank) + ": the GPU did not finish the work queued before the op in time");
    }
    if (round < 100) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(round < 1000 ? 20 : 200));
    }
  }
}

// What the caller holds: completes after the host op, once the copies back
// to the CUDA tensors are queued on the staging stream.
class StagedWork : public c10d::Work {
 public:
  StagedWork(
      int rank,
      c10d::OpType type,
      c10::Device device,
      std::vector<at::Tensor> results,
      c10::intrusive_ptr<c10d::Work> host)
      : c10d::Work(rank, type),
        device_(device),
        results_(std::move(results)),
        host_(std::move(host)),
        // A future on the device: its users' streams wait for the copies back.
        future_(c10::make_intrusive<c10::ivalue::Future>(
            c10::ListType::create(c10::TensorType::get()), std::vector<c10::Device>{device})) {}

  // Called once the host op has finished, on the thread that finished it.
  void hostDone(c10::ivalue::Future& hostFuture, c10::cuda::CUDAStream stream,
                std::vector<std::pair<at::Tensor, at::Tensor>> copyBack) {
    if (hostFuture.hasError()) {
      fail(hostFuture.exception_ptr());
      return;
    }
    try {
      c10::cuda::CUDAGuard deviceGuard(device_);
      c10::cuda::CUDAStreamGuard streamGuard(stream);
      for (auto& [tensor, buffer] : copyBack) {
        tensor.copy_(buffer.view(tensor.sizes()), /*non_blocking=*/true);
        recordStream(tensor, stream);
      }
      done_.record(stream);
      recorded_ = true;
      // On the staging stream: the future's users wait for the copies.
      future_->markCompleted(c10::IValue(results_));
    } catch (const std::exception&) {
      fail(std::current_exception());
      return;
    }
    finish();
  }

  bool isCompleted() override {
    {
      std::lock_guard<std::mutex> guard(mutex_);
      if (!completed_) {
        return false;
      }
      if (exception_ || !recorded_) {
        return true;
      }
    }
    return done_.query();
  }

  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override {
    host_->wait(timeout); // the host op: raises its typed error, bounded like it
    {
      std::unique_lock<std::mutex> lock(mutex_);
      // hostDone ran before the host work finished; this only covers a
      // completion reported by another thread a moment late.
      cv_.wait(lock, [&] { return completed_; });
      if (exception_) {
        std::rethrow_exception(exception_);
      }
    }
    blockCurrentStream();
    return true;
  }

  void synchronize() override {
    blockCurrentStream();
  }

  void blockCurrentStream() override {
    if (recorded_) {
      done_.block(c10::cuda::getCurrentCUDAStream(device_.index()));
    }
  }

  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override {
    return future_;
  }

  std::vector<at::Tensor> result() override {
    return results_;
  }

  uint64_t getSequencenumber() const override {
    return host_->getSequencenumber();
  }

 private:
  void fail(std::exception_ptr error) {
    future_->setError(error);
    finish(error);
  }

  const c10::Device device_;
  const std::vector<at::Tensor> results_;
  const c10::intrusive_ptr<c10d::Work> host_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  Event done_;
  std::atomic<bool> recorded_{false};
};

// `stage` of every item, staged in the items' order (the copies are queued on
// the staging stream in that order).
template <class T, class Stage>
auto eachInOrder(const std::vector<T>& items, Stage stage) {
  std::vector<decltype(stage(items.front()))> staged;
  staged.reserve(items.size());
  for (const auto& item : items) {
    staged.push_back(stage(item));
  }
  return staged;
}

} // namespace

c10::Device stagingDevice(const std::vector<const at::Tensor*>& tensors, const char* op) {
  c10::optional<c10::Device> device;
  for (const at::Tensor* tensor : tensors) {
    if (!tensor->defined() || !tensor->is_cuda()) {
      continue;
    }
    TORCH_CHECK_VALUE(
        !device || *device == tensor->device(), op, ": tensors on ", *device, " and ", tensor->device(),
        " in one op; the host-staged route takes one device per op");
    device = tensor->device();
  }
  TORCH_CHECK_VALUE(device.has_value(), op, ": no GPU tensor");
  return *device;
}

Staging::Staging(c10::Device device, c10::cuda::CUDAStream stream, int rank)
    : device_(device), stream_(std::move(stream)), staged_(std::make_shared<Event>()), rank_(rank) {
  // The staging stream waits for the inputs the caller's stream produces.
  Event ready;
  ready.record(c10::cuda::getCurrentCUDAStream(device_.index()));
  ready.block(stream_);
}

at::Tensor Staging::hostBuffer(const at::Tensor& tensor) {
  // Pinned, from torch's caching host allocator: reused across ops, and
  // copies from and to it run asynchronously.
  return at::empty(tensor.sizes(), tensor.options().device(at::kCPU).pinned_memory(true));
}

void Staging::stageIn(const at::Tensor& device, const at::Tensor& host) {
  c10::cuda::CUDAGuard deviceGuard(device_);
  c10::cuda::CUDAStreamGuard streamGuard(stream_);
  host.copy_(device, /*non_blocking=*/true);
  recordStream(device, stream_);
  keep_.push_back(device);
}

at::Tensor Staging::input(const at::Tensor& tensor) {
  if (!tensor.defined() || !tensor.is_cuda()) {
    return tensor;
  }
  at::Tensor host = hostBuffer(tensor);
  stageIn(tensor, host);
  return host;
}

at::Tensor Staging::output(const at::Tensor& tensor) {
  if (!tensor.defined() || !tensor.is_cuda()) {
    return tensor;
  }
  at::Tensor host = hostBuffer(tensor);
  copyBack_.emplace_back(tensor, host);
  return host;
}

at::Tensor Staging::inout(const at::Tensor& tensor) {
  at::Tensor host = input(tensor);
  if (tensor.defined() && tensor.is_cuda()) {
    copyBack_.emplace_back(tensor, host);
  }
  return host;
}

std::vector<at::Tensor> Staging::input(const std::vector<at::Tensor>& tensors) {
  return eachInOrder(tensors, [this](const at::Tensor& t) { return input(t); });
}

std::vector<at::Tensor> Staging::output(const std::vector<at::Tensor>& tensors) {
  return eachInOrder(tensors, [this](const at::Tensor& t) { return output(t); });
}

std::vector<at::Tensor> Staging::inout(const std::vector<at::Tensor>& tensors) {
  return eachInOrder(tensors, [this](const at::Tensor& t) { return inout(t); });
}

std::vector<std::vector<at::Tensor>> Staging::input(const std::vector<std::vector<at::Tensor>>& lists) {
  return eachInOrder(lists, [this](const std::vector<at::Tensor>& list) { return input(list); });
}

std::vector<std::vector<at::Tensor>> Staging::output(const std::vector<std::vector<at::Tensor>>& lists) {
  return eachInOrder(lists, [this](const std::vector<at::Tensor>& list) { return output(list); });
}

OpGate Staging::gate() {
  if (!recorded_) {
    staged_->record(stream_);
    recorded_ = true;
  }
  auto staged = staged_;
  auto keep = keep_;
  int rank = rank_;
  return [staged, keep, rank](std::chrono::steady_clock::time_point deadline, const std::atomic<bool>& aborted) {
    return waitForEvent(*staged, rank, deadline, aborted);
  };
}

void Staging::waitHere(std::chrono::milliseconds timeout) {
  std::atomic<bool> never{false};
  Status status = gate()(std::chrono::steady_clock::now() + timeout, never);
  if (!status.ok()) {
    throw MonarchError(status.kind, status.ranks, status.message);
  }
}

c10::intrusive_ptr<c10d::Work> Staging::run(
    c10d::OpType type,
    std::vector<at::Tensor> results,
    const std::function<c10::intrusive_ptr<c10d::Work>()>& hostOp) {
  c10::intrusive_ptr<c10d::Work> host;
  {
    ScopedOpGate scoped(gate());
    host = hostOp();
  }
  auto work = c10::make_intrusive<StagedWork>(rank_, type, device_, std::move(results), host);
  // The copies back are queued when the host op ends; they keep the host
  // buffers alive until then (the caching host allocator keeps them from
  // reuse until the copies on the staging stream are done).
  host->getFuture()->addCallback(
      [work, stream = stream_, copyBack = std::move(copyBack_), keep = keep_](c10::ivalue::Future& future) mutable {
        work->hostDone(future, stream, std::move(copyBack));
      });
  return work;
}

} // namespace monarch::gpu
