#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <thread>

#include "backend/device_dispatch.h"
#include "contract/backend_overrides.h"
#include "contract/op_gate.h"
#include "backend/options.h"
#include "backend/work.h"
#include "common/helper_pool.h"
#include "transport/fabric.h"
#include "transport/group_links.h"
#include "transport/rendezvous.h"

namespace monarch {

// The "monarch" c10d backend for CPU tensors. The caller's thread validates
// arguments and enqueues; one worker thread per group runs collectives in
// sequence-number order over the group's links.
class MonarchBackend : public c10d::Backend {
 public:
  // Who a backend talks to: an endpoint, a connection per rank (null for
  // this one) and the channel id its frames carry.
  struct Membership {
    std::shared_ptr<Fabric> fabric;
    std::vector<std::shared_ptr<Connection>> connections;
    uint64_t channelId = 0;
    int rank = 0;
  };

  // A new group: a fresh endpoint, connected through `store`.
  static c10::intrusive_ptr<MonarchBackend> join(
      const c10::intrusive_ptr<c10d::Store>& store,
      int rank,
      int size,
      const std::string& groupName,
      BackendOptions options);

  // A group made with enable_reconfigure=True: a group of one on a fresh
  // endpoint until its first reconfigure(opts), which forms it from the
  // members' handles (native_reconfigure.cc). Its job token is derived from
  // `options.job` when given, else drawn by rank 0 of the creating group in
  // `store`; handles of other jobs are refused.
  static c10::intrusive_ptr<MonarchBackend> createReconfigurable(
      const c10::intrusive_ptr<c10d::Store>& store,
      int rank,
      int size,
      const std::string& groupName,
      BackendOptions options);

  MonarchBackend(Membership membership, BackendOptions options);
  ~MonarchBackend() override;

  // A new group of new membership through `store` that keeps the links to
  // peers that are the same processes as before and connects only new
  // members (ProcessGroupMonarch's configure()). The native reconfigure
  // forms its membership on the same links, in place (rebind()).
  c10::intrusive_ptr<MonarchBackend> reconfigure(
      const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, const std::string& groupName);

  MONARCH_C10D_RECONFIGURE_OVERRIDES

  MONARCH_C10D_SHRINK_OVERRIDES
  bool supportsSplitting() const override {
    return true;
  }
  c10::intrusive_ptr<c10d::Backend> split(
      const c10::intrusive_ptr<c10d::Store>& store,
      const std::vector<int>& ranks,
      const c10::intrusive_ptr<c10d::Backend::Options>& opts) override;
  c10::intrusive_ptr<c10d::Backend::Options> getBackendOptions() override;

  const std::string getBackendName() const override {
    return "monarch";
  }
  void setTimeout(std::chrono::milliseconds timeout) override;

  // c10d's sequence numbers (ProcessGroupWrapper under
  // TORCH_DISTRIBUTED_DEBUG=DETAIL, split_group, object collectives): the
  // collectives this rank has posted on the group, host and device. Every
  // group starts at zero when it forms, which all its ranks do together, so
  // there is nothing left to agree on when c10d asks for it.
  void setSequenceNumberForGroup() override {}
  uint64_t getSequenceNumberForGroup() override;

  MONARCH_C10D_OPS_OVERRIDES
  c10::intrusive_ptr<c10d::Work> allreduce_sparse(std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) override;

  // CPU tensors in shared memory (transport/shm/tensor_pool.h), which the
  // group's shared-memory collectives read and write in place: FSDP2's
  // set_allocate_memory_from_process_group_for_comm allocates its buffers
  // through these (pooled_tensors.cc). The CPU is device index -1
  // (torch.device("cpu")); a CUDA device keeps its own allocator.
  bool supportsTensorAlloc(c10::DeviceIndex deviceIdx) override;
  at::Tensor allocateTensor(long size, at::TensorOptions options = {}) override;

  c10d::ErrorType getError() override;
  void abort() override;
  void shutdown() override;

  // Why the group is broken; ok() while it is healthy.
  Status error();
  // The backend of this group's CUDA tensors ("monarch-NCCL",
  // "monarch-host-staged"); empty before its first op on CUDA tensors.
  std::string deviceBackendName() {
    return device_.backendName();
  }
  // Threads that reduce and copy this group's large messages, its worker
  // included (Options.threads, else the default of attach()).
  int threads() const {
    return threads_.load();
  }
  // Connections this group holds (for tests: shrinking opens none).
  size_t connectionCount() const;
  // Channels registered on this group's endpoint (for tests: reconfigures,
  // failed ones included, keep none).
  size_t channelCount() const;
  // Payload bytes this rank has sent to each group rank (diagnostics).
  std::vector<uint64_t> payloadBytesSent() const {
    return links()->payloadBytesSent();
  }
  // Payload bytes the group's links moved, by path, summed over its peers
  // (the links are shared with related groups: counts include theirs).
  std::map<std::string, uint64_t> transportBytes() const {
    return links()->transportBytes();
  }
  // The libfabric provider of this endpoint's RDMA reads; empty when none.
  std::string rdmaProvider() const {
    return fabric_->paths().rdmaProvider();
  }

 private:
  // One collective: what it is, and the code that runs it on the worker.
  struct QueuedOp {
    uint64_t seq;
    OpSignature signature;
    std::function<void(GroupLinks&)> run;
    c10::intrusive_ptr<MonarchWork> work;
    std::shared_ptr<void> keepalive;
    std::chrono::milliseconds timeout;
    OpGate gate; // what the data waits for before `run` (see op_gate.h)
  };

  // Enqueues a collective. `run` receives the links; `tensors` are kept alive
  // until every transfer that may touch them is done.
  c10::intrusive_ptr<c10d::Work> enqueue(
      c10d::OpType type,
      OpSignature signature,
      std::vector<at::Tensor> outputs,
      std::vector<at::Tensor> tensors,
      std::chrono::milliseconds timeout,
      std::function<void(GroupLinks&)> run);
  // SUM of a sparse COO CPU tensor (sparse_allreduce.cc).
  c10::intrusive_ptr<c10d::Work> allreduceSparse(at::Tensor tensor, const c10d::AllreduceOptions& opts);
  c10::intrusive_ptr<c10d::Work> postPointToPoint(
      c10d::OpType type, at::Tensor& tensor, int peer, int tag);
  std::chrono::milliseconds timeoutFor(std::chrono::milliseconds requested) const;
  // The current membership's links, for threads other than the worker: the
  // reference keeps them alive across an in-place reconfigure that replaces
  // them. The worker uses links_ itself: the links it runs on are replaced
  // only after it has ended.
  std::shared_ptr<GroupLinks> links() const;
  // Runs the ops of membership `generation` (attach()) until it retires.
  void workerLoop(uint64_t generation);
  void runOp(QueuedOp& op);
  // Names the ranks that had not started the op that timed out.
  void explainTimeout(const QueuedOp& op, Status& status);
  // Fails the group at once if a link it was formed over is already down.
  void failLinksAlreadyDown();
  // A group over a subset of this group's ranks, on the same links.
  c10::intrusive_ptr<MonarchBackend> derive(const std::vector<int>& members, uint64_t channelId);

  // A membership's lifetime on this backend: attach() binds its links and
  // starts the worker (sequence numbers start over); retire() ends it (with
  // a failure `reason`, what is queued or running fails with it and the
  // peers are told; with ok(), queued ops run first) and returns false when
  // it had already ended. `leaving`: this rank moves to another membership,
  // and peers may still finish the ops it finished (Channel::leave).
  void attach(Membership membership);
  bool retire(const Status& reason, bool leaving = false);
  // Makes the running op fail with AbortedError at its next wait.
  void interruptWorker();
  // Retires the membership and, with `releaseEndpoint`, this group's lease
  // on the endpoint (the last lease closes it).
  void stop(const Status& reason, bool releaseEndpoint);
  // Native reconfigure (native_reconfigure.cc): checks that every member
  // formed `membership` over links that both ends hold, by a barrier on a
  // channel of its own (by `deadline`). Returns why not; then the peers have
  // been told and the membership dropped, the current one as it was.
  Status confirm(const Membership& membership, Deadline deadline);
  // Replaces the current membership with `membership` in place: what is
  // queued or running on the current one fails with AbortedError.
  void rebind(Membership membership, int64_t uuid);
  // Releases the channels of earlier reconfigures whose confirmation failed
  // (see confirm()).
  void releaseUnconfirmed();

  // What a group made with enable_reconfigure=True keeps across reconfigures.
  struct Reconfigurable {
    JobToken token;
    std::string groupName;
    std::set<int64_t> usedUuids;
    // Confirmation channels of failed reconfigures, kept registered until the
    // next reconfigure so that they answer the members still asking who had
    // started them.
    std::vector<uint64_t> unconfirmed;
    // The members' endpoints, in rank order.
    std::vector<uint64_t> members;
  };

  BackendOptions options_;
  std::shared_ptr<Fabric> fabric_;
  std::shared_ptr<CompletionSignal> signal_;
  std::atomic<bool> aborted_{false};
  std::shared_ptr<GroupLinks> links_; // replaced under mutex_ (attach)
  std::atomic<int64_t> timeoutMs_;
  // One change of membership at a time (rebind() by reconfigure, stop() by
  // abort and shutdown), whatever threads call them.
  std::mutex membershipMutex_;

  mutable std::mutex mutex_;
  std::condition_variable queueChanged_;
  std::deque<QueuedOp> queue_;
  uint64_t nextSeq_ = 1;
  uint64_t generation_ = 0; // memberships attached so far; a worker of an older one exits
  bool holdsEndpoint_ = true; // this group's lease on fabric_ (see stop)
  // Set when made with enable_reconfigure=True (createReconfigurable).
  std::unique_ptr<Reconfigurable> reconfigurable_;
  std::mutex reconfigureMutex_; // one reconfigure at a time; abort() never takes it
  uint64_t derivations_ = 0; // shrinks so far; makes derived channel ids unique
  bool stopping_ = false;
  // Helps the worker reduce large messages (AlgorithmConfig::helpers).
  std::unique_ptr<HelperPool> helpers_;
  std::atomic<int> threads_{1}; // helpers_->threads(), for readers on other threads
  const int torchThreads_; // torch's threads when the group was created
  std::thread worker_;
  // Ops on CUDA tensors go to the group's NCCL/RCCL backend (csrc/gpu/).
  DeviceDispatch device_;
};

} // namespace monarch
