#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "contract/backend_overrides.h"
#include "gpu/device_backend.h"
#include "gpu/watchdog.h"

namespace monarch::gpu {

// The c10d backend for GPU tensors of one group, over NCCL (RCCL on ROCm).
// The caller's thread checks arguments and enqueues onto a communicator's
// own stream, ordered after the caller's stream by an event; the watchdog
// completes works, times ops out and turns NCCL's asynchronous errors into
// typed failures. After the first failure the backend stays errored: every
// pending and later op fails with that error, until the group is shrunk or
// rebuilt.
class NcclBackend : public c10d::Backend {
 public:
  explicit NcclBackend(DeviceGroup group);
  ~NcclBackend() override;

  const std::string getBackendName() const override;
  void setTimeout(std::chrono::milliseconds timeout) override;
  c10d::ErrorType getError() override;
  void abort() override;
  void shutdown() override;
  // Collectives posted so far (point-to-point ops not counted), as c10d's
  // sequence numbers; they start at zero when the group forms.
  void setSequenceNumberForGroup() override {}
  uint64_t getSequenceNumberForGroup() override {
    return collectives_.load();
  }

  MONARCH_C10D_SHRINK_OVERRIDES
  // The backend of `child` (the survivors): communicators shrunk with
  // ncclCommShrink where possible, else made anew on first use.
  c10::intrusive_ptr<NcclBackend> shrinkInto(DeviceGroup child, const std::vector<int64_t>& excluded, int shrinkFlags);

  MONARCH_C10D_OPS_OVERRIDES

  // Why the backend is broken; ok() while healthy.
  Status error();

 private:
  // One op to enqueue: what it is, on which device, and the tensors it
  // touches. `outputs` are the work's result; `keep` (inputs, staging
  // buffers) stays alive and away from the allocator until the op is done.
  struct Op {
    c10d::OpType type;
    const char* name;
    c10::Device device;
    std::vector<at::Tensor> outputs;
    std::vector<at::Tensor> keep;
    std::chrono::milliseconds timeout;
    int peer = -1; // point-to-point: the other rank, on a pair communicator
    bool blockHostOnWait = false;
  };

  // Orders the communicator's stream after the caller's, issues `calls` as
  // one NCCL group, then `after` (copies back into non-contiguous outputs)
  // on the communicator's stream, and hands the work to the watchdog. A
  // failure here fails the work (raised by wait()) and breaks the backend.
  c10::intrusive_ptr<c10d::Work> launch(
      Op op, const std::function<void(GroupCalls&, int peerInComm)>& calls, const std::function<void()>& after = {});
  // The communicator for `device` (the whole group, or the pair with `peer`),
  // made on first use; throws MonarchError when that fails.
  std::shared_ptr<Communicator> communicator(c10::DeviceIndex device, int peer);
  // Breaks the backend: fails the pending ops on `comm` (all when null)
  // and aborts it.
  void fail(const std::shared_ptr<Communicator>& comm, Status status);
  // Names the ranks that had issued fewer GPU ops, through the store.
  void explainTimeout(Status& status);
  std::chrono::milliseconds timeoutFor(std::chrono::milliseconds requested) const;

  DeviceGroup group_;
  std::atomic<int64_t> timeoutMs_;
  std::atomic<uint64_t> seq_{0};
  std::atomic<uint64_t> collectives_{0};
  std::atomic<bool> cancel_{false}; // stops communicator creation on abort
  std::atomic<bool> stopped_{false};

  std::mutex commsMutex_;
  std::map<std::string, std::shared_ptr<Communicator>> comms_;
  std::mutex createMutex_; // one communicator creation at a time
  std::map<std::string, uint64_t> created_; // per kind: names the store keys
  uint64_t shrinks_ = 0;

  std::mutex errorMutex_;
  Status error_;

  Watchdog watchdog_;
};

} // namespace monarch::gpu
