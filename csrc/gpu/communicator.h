#pragma once

#include <c10/cuda/CUDAStream.h>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/status.h"
#include "gpu/event.h"
#include "gpu/nccl_types.h"

namespace monarch::gpu {

using Clock = std::chrono::steady_clock;

// The NCCL calls of one op, issued between ncclGroupStart and ncclGroupEnd on
// a communicator and its stream. Each call records the first failure.
class GroupCalls {
 public:
  GroupCalls(ncclComm_t comm, cudaStream_t stream) : comm_(comm), stream_(stream) {}

  // The reduction of `tensor` by `op`; custom (PREMUL_SUM) ops are destroyed
  // once the group has been enqueued.
  NcclReduction reduction(const at::Tensor& tensor, const c10d::ReduceOp& op);

  void allReduce(const void* send, void* recv, size_t count, const NcclReduction& reduction);
  void broadcast(const void* send, void* recv, size_t bytes, int root);
  void reduce(const void* send, void* recv, size_t count, const NcclReduction& reduction, int root);
  void allGather(const void* send, void* recv, size_t bytesPerRank);
  void reduceScatter(const void* send, void* recv, size_t countPerRank, const NcclReduction& reduction);
  void send(const void* buffer, size_t bytes, int peer);
  void recv(void* buffer, size_t bytes, int peer);

  ncclResult_t result() const {
    return result_;
  }
  const std::vector<NcclReduction>& customReductions() const {
    return custom_;
  }

 private:
  void check(ncclResult_t result);

  ncclComm_t comm_;
  cudaStream_t stream_;
  ncclResult_t result_ = ncclSuccess;
  std::vector<NcclReduction> custom_;
};

// One NCCL communicator: a group's ranks on one device each, with a
// dedicated stream. Non-blocking (config.blocking = 0): no call into NCCL
// waits for peers, so every wait here is bounded and can be abandoned.
class Communicator {
 public:
  // Joins the communicator of `size` ranks for `device`: rank 0 publishes a
  // unique id under `key` in `store`, every rank initialises and polls until
  // the communicator is ready. Throws MonarchError: kTimeout naming the ranks
  // that never arrived, kPeerFailure when NCCL fails, kAborted on `cancel`.
  static std::shared_ptr<Communicator> create(
      const c10::intrusive_ptr<c10d::Store>& store,
      const std::string& key,
      int rank,
      int size,
      c10::DeviceIndex device,
      std::chrono::milliseconds timeout,
      const std::atomic<bool>& cancel);

  ~Communicator();

  // The communicator of the ranks not in `excluded`, through ncclCommShrink
  // (collective over them). Null when the library lacks it or it failed;
  // the caller then builds a new communicator instead.
  std::shared_ptr<Communicator> shrink(
      const std::vector<int>& excluded, bool abortPending, std::chrono::milliseconds timeout);

  c10::DeviceIndex device() const {
    return device_;
  }
  const c10::cuda::CUDAStream& stream() const {
    return stream_;
  }
  int rank() const {
    return rank_;
  }
  int size() const {
    return size_;
  }

  // Orders the communicator's stream after everything queued so far on
  // `caller` (an event; neither host waits), issues `calls` as one group and
  // waits until the communicator has taken them (enqueued on its stream), at
  // most until `deadline`.
  Status run(
      const c10::cuda::CUDAStream& caller,
      const std::function<void(GroupCalls&)>& calls,
      Clock::time_point deadline);

  // The communicator's asynchronous error; ok() while healthy. Never blocks.
  Status asyncError();

  // Stops the communicator's kernels and frees it. Returns within a bound
  // even if NCCL does not (the call then finishes on a detached thread).
  // Idempotent; ops issued afterwards fail with kAborted.
  void abort(const std::string& why);
  bool aborted() const {
    return aborted_.load();
  }
  // Frees a healthy communicator with no pending work (bounded like abort).
  void destroy();

 private:
  Communicator(ncclComm_t comm, c10::DeviceIndex device, int rank, int size);
  // Polls a non-blocking communicator until it leaves ncclInProgress.
  Status waitReady(ncclResult_t first, Clock::time_point deadline, const char* what, const std::atomic<bool>* cancel);
  // A failed NCCL call as a Status; `comm` (may be null) names the last error.
  static Status failure(ncclResult_t result, const char* what, ncclComm_t comm);
  // Takes the handle away from everyone else (null if already gone).
  ncclComm_t release(const std::string& why);

  c10::DeviceIndex device_;
  int rank_;
  int size_;
  c10::cuda::CUDAStream stream_;
  std::mutex issueMutex_; // one group of calls at a time
  Event ready_; // re-recorded for each op, under issueMutex_
  std::mutex handleMutex_; // held for each NCCL call; abort takes the handle under it
  ncclComm_t comm_;
  std::atomic<bool> aborted_{false};
  std::string abortReason_;
};

} // namespace monarch::gpu
