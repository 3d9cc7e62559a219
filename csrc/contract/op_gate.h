#pragma once

#include <atomic>
#include <chrono>
#include <functional>

#include "common/status.h"

namespace monarch {

// A condition an op's data must meet before the group's worker touches it:
// the host-staged GPU route's device-to-host copies, which finish on a CUDA
// stream after the op is enqueued. The gate runs on the worker, polls until
// `deadline` or until `aborted` turns true, and returns what failed, if
// anything (the op then fails with it, like a failed transfer).
using OpGate = std::function<Status(std::chrono::steady_clock::time_point deadline, const std::atomic<bool>& aborted)>;

// Sets the gate of the next op this thread enqueues on any group, for as long
// as it lives: the staged route wraps its call into the host backend's
// collective with it, so that the collectives need no extra parameter.
class ScopedOpGate {
 public:
  explicit ScopedOpGate(OpGate gate);
  ~ScopedOpGate();
  ScopedOpGate(const ScopedOpGate&) = delete;
  ScopedOpGate& operator=(const ScopedOpGate&) = delete;

  // The gate set on this thread (empty when none), which is cleared: one op takes it.
  static OpGate take();
};

} // namespace monarch
