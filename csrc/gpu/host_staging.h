#pragma once

// One op of the host-staged route: CUDA tensors are copied into pinned host
// memory on a staging stream ordered after the caller's stream, the host
// backend runs the op on those copies once the copies have landed (a gate on
// its worker, see contract/op_gate.h), and the results are copied back on the
// staging stream. The caller's host waits only for the host op itself (in
// wait()), and for the copies to the host where the host path reads its
// inputs on the calling thread (waitHere).

#include <ATen/ATen.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "contract/op_gate.h"
#include "gpu/event.h"

namespace monarch::gpu {

class Staging {
 public:
  // `stream` is the staging stream of `device`; it waits for what the
  // caller's current stream has queued so far. `rank` names this rank in
  // the failures of the copies.
  Staging(c10::Device device, c10::cuda::CUDAStream stream, int rank);

  // A host tensor holding `tensor`'s data (CPU tensors pass through).
  at::Tensor input(const at::Tensor& tensor);
  // A host tensor whose content is copied into `tensor` after the op.
  at::Tensor output(const at::Tensor& tensor);
  // Both: the op reads and writes it (allreduce, broadcast, ...).
  at::Tensor inout(const at::Tensor& tensor);
  std::vector<at::Tensor> input(const std::vector<at::Tensor>& tensors);
  std::vector<at::Tensor> output(const std::vector<at::Tensor>& tensors);
  std::vector<at::Tensor> inout(const std::vector<at::Tensor>& tensors);
  std::vector<std::vector<at::Tensor>> input(const std::vector<std::vector<at::Tensor>>& lists);
  std::vector<std::vector<at::Tensor>> output(const std::vector<std::vector<at::Tensor>>& lists);

  // The gate for the host op: passes once the copies to the host are done.
  OpGate gate();
  // Waits for the same on the calling thread (ops the host backend runs on
  // the caller's thread: send); throws the gate's failure.
  void waitHere(std::chrono::milliseconds timeout);

  // Runs `hostOp` (the same op on the host tensors, which enqueues it with
  // the gate) and returns the work the caller sees: done once the results
  // are back in the CUDA tensors, `results` as its value.
  c10::intrusive_ptr<c10d::Work> run(
      c10d::OpType type,
      std::vector<at::Tensor> results,
      const std::function<c10::intrusive_ptr<c10d::Work>()>& hostOp);

 private:
  void stageIn(const at::Tensor& device, const at::Tensor& host);
  at::Tensor hostBuffer(const at::Tensor& tensor);

  c10::Device device_;
  c10::cuda::CUDAStream stream_;
  std::shared_ptr<Event> staged_; // after the copies to the host
  bool recorded_ = false;
  const int rank_;
  std::vector<std::pair<at::Tensor, at::Tensor>> copyBack_; // (CUDA tensor, host buffer)
  std::vector<at::Tensor> keep_; // CUDA inputs, until the copies are done
};

// The device of the op's CUDA tensors; all of them must be on the same one.
c10::Device stagingDevice(const std::vector<const at::Tensor*>& tensors, const char* op);

} // namespace monarch::gpu
