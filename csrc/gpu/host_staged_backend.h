#pragma once

#include <c10/cuda/CUDAStream.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>

#include "contract/backend_overrides.h"
#include "gpu/host_staging.h"

namespace monarch::gpu {

// The c10d backend for CUDA tensors of a group whose ranks share a GPU, or
// that has no NCCL/RCCL: each op stages its CUDA tensors through pinned host
// memory (host_staging.h) and runs on the group's host backend, so it gets
// the host path's algorithms (shared memory included), sequence matching,
// timeouts and typed failures. Abort, shutdown and errors are the host
// backend's: this backend holds nothing but the staging streams.
class HostStagedBackend : public c10d::Backend {
 public:
  HostStagedBackend(c10d::Backend& host, std::chrono::milliseconds timeout);

  const std::string getBackendName() const override {
    return "monarch-host-staged";
  }
  void setTimeout(std::chrono::milliseconds timeout) override {
    timeoutMs_ = timeout.count();
  }

  MONARCH_C10D_OPS_OVERRIDES

 private:
  // Whether the host backend packs the op's inputs on the calling thread
  // (lists flattened into one buffer, reduce's copy on a non-root rank,
  // send): then their copies to the host must have landed before the call.
  enum class Pack { kOnWorker, kOnCaller };
  // The route of an op that reads and writes the same tensors: stages them
  // and runs `hostOp(hostTensors)`.
  template <typename HostOp>
  c10::intrusive_ptr<c10d::Work> inPlace(
      const char* name, c10d::OpType type, std::vector<at::Tensor>& tensors, Pack pack, HostOp&& hostOp);
  // The route of an op with outputs and inputs: stages both and runs
  // `hostOp(hostOutputs, hostInputs)`; `results` are the work's result.
  template <typename Outputs, typename Inputs, typename HostOp>
  c10::intrusive_ptr<c10d::Work> outOfPlace(
      const char* name, c10d::OpType type, Outputs& outputs, Inputs& inputs, std::vector<at::Tensor> results,
      Pack pack, HostOp&& hostOp);
  // An op's staging on the device of `tensors` (one device per op).
  Staging stage(const std::vector<const at::Tensor*>& tensors, const char* op);
  c10::cuda::CUDAStream streamFor(c10::Device device);
  // How long a caller may wait for its op's copies to the host.
  std::chrono::milliseconds packTimeout() const {
    return std::chrono::milliseconds(timeoutMs_.load());
  }

  c10d::Backend& host_;
  std::atomic<int64_t> timeoutMs_;
  std::mutex streamsMutex_;
  std::map<c10::DeviceIndex, c10::cuda::CUDAStream> streams_;
};

} // namespace monarch::gpu
