#pragma once

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "gpu/nccl_work.h"

namespace monarch::gpu {

// The thread that watches a backend's GPU ops: it completes each op's work
// (and future) once the GPU has passed it, and reports a communicator whose
// ops are overdue or that NCCL says has failed. It never blocks on the GPU.
class Watchdog {
 public:
  // `onFailure(comm, status)` runs on the watchdog thread; it is expected to
  // fail the communicator's pending ops (failPending) and abort it.
  using FailureHandler = std::function<void(const std::shared_ptr<Communicator>&, const Status&)>;

  explicit Watchdog(FailureHandler onFailure);
  ~Watchdog();

  void watch(c10::intrusive_ptr<NcclWork> work);
  // Polls `comm` for asynchronous errors, also while it has no ops.
  void watchCommunicator(std::shared_ptr<Communicator> comm);

  // Fails the pending ops on `comm` (all when null) with `status`, the
  // message prefixed with each op's description.
  void failPending(const Communicator* comm, const Status& status);
  // Waits until no op is pending or `deadline`; true if none is.
  bool waitIdle(Clock::time_point deadline);
  // Pending ops, oldest first.
  std::vector<c10::intrusive_ptr<NcclWork>> pending();
  void stop();

 private:
  void loop();

  FailureHandler onFailure_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<c10::intrusive_ptr<NcclWork>> pending_;
  std::vector<std::weak_ptr<Communicator>> comms_;
  bool stopping_ = false;
  std::thread thread_;
};

} // namespace monarch::gpu
