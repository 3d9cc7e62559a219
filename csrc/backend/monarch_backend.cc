// Lifecycle of the monarch backend: rendezvous, the worker thread that runs
// collectives in order, failure bookkeeping, abort and shutdown. The
// collectives themselves are in collective_ops.cc and point_to_point.cc.

#include "backend/monarch_backend.h"

#include <ATen/Parallel.h>

#include <algorithm>

#include "backend/store_adapter.h"
#include "transport/store_rendezvous.h"
#include "common/logging.h"
#include "common/op_failure.h"
#include "common/usable_cpus.h"
#include "contract/errors.h"
#include "transport/host_identity.h"
#include "transport/wire.h"

namespace monarch {

namespace {

// The backend whose worker runs on this thread, if any.
thread_local const MonarchBackend* workerOf = nullptr;

// Ranks of `membership` on `host` (this rank's), this one included.
int ranksOnHost(const MonarchBackend::Membership& membership, uint64_t host) {
  return 1 + static_cast<int>(std::count_if(
                 membership.connections.begin(), membership.connections.end(),
                 [host](const auto& connection) { return connection && connection->peer().hostId == host; }));
}

// The group's threads where Options.threads is None: `torchThreads`, and at
// least two where the CPUs this process may use (usableCpus: its affinity
// and its cgroup's quota) number two for each of the group's ranks on the
// host. One thread's copy is bound by its core's outstanding misses, not by
// memory: at one torch thread per rank on a 16-core host, a second thread
// made 16 and 64 MB allreduce, reduce-scatter and allgather 1.2-2.3x faster
// at worlds 2-8 in most cells (benchmarks/RESULTS.md); Gloo runs two
// threads per group as well.
int poolThreads(const std::optional<int>& setting, int torchThreads, int ranksOnHost) {
  if (setting) {
    return *setting;
  }
  return std::max(torchThreads, usableCpus() >= 2 * ranksOnHost ? 2 : 1);
}

} // namespace

FabricOptions BackendOptions::fabricOptions() const {
  FabricOptions fabric;
  fabric.bindAddress = bindAddress.empty() ? defaultBindAddress() : bindAddress;
  fabric.heartbeatTimeout = heartbeatTimeout;
  fabric.hostId = hostName.empty() ? localHostId() : fnv1a64(hostName.data(), hostName.size());
  fabric.transport = transport;
  return fabric;
}

c10::intrusive_ptr<MonarchBackend> MonarchBackend::join(
    const c10::intrusive_ptr<c10d::Store>& store,
    int rank,
    int size,
    const std::string& groupName,
    BackendOptions options) {
  FabricOptions fabricOptions = options.fabricOptions();
  Membership membership;
  membership.rank = rank;
  membership.channelId = fnv1a64(groupName.data(), groupName.size());
  try {
    membership.fabric = std::make_shared<Fabric>(fabricOptions);
    auto deadline = Clock::now() + options.timeout;
    StoreAdapter adapter(store, deadline);
    GroupIdentity identity{membership.channelId, 0, rank, size};
    StoreRendezvous rendezvous(adapter, identity);
    membership.connections = membership.fabric->connectGroup(rendezvous, identity, deadline);
  } catch (const rdma::RdmaUnavailable&) {
    throw; // not a peer's fault: Python gets RdmaUnavailableError, naming what is missing
  } catch (const std::exception& e) { // transport errors, and the store's (c10::DistStoreError)
    throw MonarchError(
        ErrorKind::kPeerFailure, {},
        "monarch: rank " + std::to_string(rank) + " could not join group '" + groupName + "': " + e.what());
  }
  MONARCH_LOG(kInfo) << "rank " << rank << "/" << size << " joined group '" << groupName << "' at "
                     << fabricOptions.bindAddress;
  auto backend = c10::make_intrusive<MonarchBackend>(std::move(membership), options);
  backend->device_.bind({store, rank, size, groupName, options.timeout, options.gpuTransport}); // on first use
  return backend;
}

MonarchBackend::MonarchBackend(Membership membership, BackendOptions options)
    : c10d::Backend(membership.rank, static_cast<int>(membership.connections.size())),
      options_(std::move(options)),
      fabric_(std::move(membership.fabric)),
      signal_(std::make_shared<CompletionSignal>()),
      timeoutMs_(options_.timeout.count()),
      // Read on the creating thread: with OpenMP, torch.set_num_threads()
      // sets the calling thread's count only.
      torchThreads_(at::get_num_threads()) {
  fabric_->acquire();
  attach(std::move(membership));
  device_.attachHost(this);
  init();
}

void MonarchBackend::attach(Membership membership) {
  // No op runs (the membership before has retired): the pool can follow the
  // ranks on this host.
  const int threads = poolThreads(options_.threads, torchThreads_, ranksOnHost(membership, fabric_->hostId()));
  if (!helpers_ || helpers_->threads() != threads) {
    helpers_ = std::make_unique<HelperPool>(threads);
    options_.algorithms.helpers = helpers_.get(); // not the parent's, for derived groups
    threads_ = threads;
  }
  auto links = std::make_shared<GroupLinks>(
      membership.rank, fabric_->hostId(), fabric_->endpointId(), options_.transport.sharesHostMemory() ? options_.shmSegmentBytes : 0,
      std::move(membership.connections), fabric_->channels().get(membership.channelId), signal_,
      &aborted_);
  aborted_ = false;
  uint64_t generation;
  {
    std::lock_guard<std::mutex> guard(mutex_);
    links_ = std::move(links);
    stopping_ = false;
    nextSeq_ = 1;
    generation = ++generation_;
  }
  failLinksAlreadyDown();
  worker_ = std::thread([this, generation] { workerLoop(generation); });
}

std::shared_ptr<GroupLinks> MonarchBackend::links() const {
  std::lock_guard<std::mutex> guard(mutex_);
  return links_;
}

void MonarchBackend::failLinksAlreadyDown() {
  // A link that failed before this group was bound to it (a group shrunk or
  // split over a peer that has died since) told nobody in this group: fail
  // the group now, naming those peers, instead of letting ops wait for them.
  std::vector<int> down;
  const auto& connections = links_->connections();
  for (size_t peer = 0; peer < connections.size(); ++peer) {
    if (connections[peer] && connections[peer]->failed()) {
      down.push_back(static_cast<int>(peer));
    }
  }
  if (!down.empty()) {
    // Same wording as a link that fails later ("lost rank N: ..."), so a
    // caller matching on the rank finds it either way.
    const std::string lost = down.size() == 1 ? "lost rank " + std::to_string(down[0]) + ": its link was"
                                              : "lost ranks " + formatRanks(down) + ": their links were";
    links_->channel().fail(
        Status::error(ErrorKind::kPeerFailure, down, lost + " already down when this group was formed"),
        /*tellPeers=*/true);
  }
}

c10::intrusive_ptr<MonarchBackend> MonarchBackend::derive(const std::vector<int>& members, uint64_t channelId) {
  Membership membership;
  membership.fabric = fabric_;
  membership.channelId = channelId;
  auto links = this->links();
  for (size_t i = 0; i < members.size(); ++i) {
    if (members[i] == rank_) {
      membership.rank = static_cast<int>(i);
    }
    membership.connections.push_back(links->connections()[members[i]]);
  }
  BackendOptions options = options_;
  options.timeout = std::chrono::milliseconds(timeoutMs_.load());
  return c10::make_intrusive<MonarchBackend>(std::move(membership), std::move(options));
}

c10::intrusive_ptr<c10d::Backend> MonarchBackend::shrink(
    const std::vector<int64_t>& ranksToExclude,
    int shrinkFlags,
    const c10::intrusive_ptr<c10d::Backend::Options>& optsOverride) {
  std::vector<bool> excluded(size_, false);
  for (int64_t rank : ranksToExclude) {
    TORCH_CHECK_VALUE(rank >= 0 && rank < size_, "shrink: rank ", rank, " is not in a group of size ", size_);
    excluded[rank] = true;
  }
  TORCH_CHECK_VALUE(!excluded[rank_], "shrink: this rank (", rank_, ") is in the exclusion list");
  std::vector<int> members;
  for (int rank = 0; rank < size_; ++rank) {
    if (!excluded[rank]) {
      members.push_back(rank);
    }
  }
  // Every survivor derives the same channel id from the same inputs.
  uint64_t derivation;
  {
    std::lock_guard<std::mutex> guard(mutex_);
    derivation = ++derivations_;
  }
  std::string key = "shrink/" + std::to_string(links()->channel().id()) + "/" + std::to_string(derivation);
  for (int rank : members) {
    key += "/" + std::to_string(rank);
  }
  // Derived first: it takes its own lease on the endpoint, so that aborting
  // the old group (the last lease so far) does not close the shared links.
  auto shrunk = derive(members, fnv1a64(key.data(), key.size()));
  if (shrinkFlags != 0) {
    abort(); // SHRINK_ABORT: stop what is pending on the old group
  }
  shrunk->device_.inheritShrunk(device_, ranksToExclude, shrinkFlags);
  if (optsOverride) {
    shrunk->setTimeout(optsOverride->timeout);
  }
  return shrunk;
}

c10::intrusive_ptr<c10d::Backend> MonarchBackend::split(
    const c10::intrusive_ptr<c10d::Store>& store,
    const std::vector<int>& ranks,
    const c10::intrusive_ptr<c10d::Backend::Options>& opts) {
  std::vector<int> members(ranks.begin(), ranks.end());
  std::sort(members.begin(), members.end());
  for (int rank : members) {
    TORCH_CHECK_VALUE(rank >= 0 && rank < size_, "split: rank ", rank, " is not in a group of size ", size_);
  }
  if (std::find(members.begin(), members.end(), rank_) == members.end()) {
    return nullptr; // not a member of the new group
  }
  std::string name = opts ? opts->group_name : std::string();
  std::string key = "split/" + std::to_string(links()->channel().id()) + "/" + name;
  for (int rank : members) {
    key += "/" + std::to_string(rank);
  }
  auto result = derive(members, fnv1a64(key.data(), key.size()));
  result->device_.inheritSplit(device_, store, members, name);
  if (opts) {
    result->setTimeout(opts->timeout);
  }
  return result;
}

c10::intrusive_ptr<MonarchBackend> MonarchBackend::reconfigure(
    const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, const std::string& groupName) {
  Membership membership;
  membership.fabric = fabric_;
  membership.rank = rank;
  membership.channelId = fnv1a64(groupName.data(), groupName.size());
  try {
    auto deadline = Clock::now() + std::chrono::milliseconds(timeoutMs_.load());
    StoreAdapter adapter(store, deadline);
    GroupIdentity identity{membership.channelId, 0, rank, size};
    StoreRendezvous rendezvous(adapter, identity);
    membership.connections = fabric_->connectGroup(rendezvous, identity, deadline);
  } catch (const std::exception& e) { // transport errors, and the store's (c10::DistStoreError)
    throw MonarchError(
        ErrorKind::kPeerFailure, {},
        "monarch: rank " + std::to_string(rank) + " could not reconfigure into group '" + groupName + "': " + e.what());
  }
  BackendOptions options = options_;
  options.timeout = std::chrono::milliseconds(timeoutMs_.load());
  auto backend = c10::make_intrusive<MonarchBackend>(std::move(membership), options);
  backend->device_.bind({store, rank, size, groupName, options.timeout, options.gpuTransport});
  return backend;
}

c10::intrusive_ptr<c10d::Backend::Options> MonarchBackend::getBackendOptions() {
  return c10::make_intrusive<c10d::Backend::Options>("monarch", std::chrono::milliseconds(timeoutMs_.load()));
}

size_t MonarchBackend::connectionCount() const {
  return fabric_->connectionCount();
}

size_t MonarchBackend::channelCount() const {
  return fabric_->channels().size();
}

MonarchBackend::~MonarchBackend() {
  shutdown();
}

void MonarchBackend::setTimeout(std::chrono::milliseconds timeout) {
  timeoutMs_ = timeout.count();
  device_.setTimeout(timeout);
}

uint64_t MonarchBackend::getSequenceNumberForGroup() {
  uint64_t host;
  {
    std::lock_guard<std::mutex> guard(mutex_);
    host = nextSeq_ - 1;
  }
  return host + device_.collectivesPosted();
}

std::chrono::milliseconds MonarchBackend::timeoutFor(std::chrono::milliseconds requested) const {
  return requested == c10d::kUnsetTimeout ? std::chrono::milliseconds(timeoutMs_.load()) : requested;
}

c10::intrusive_ptr<c10d::Work> MonarchBackend::enqueue(
    c10d::OpType type,
    OpSignature signature,
    std::vector<at::Tensor> outputs,
    std::vector<at::Tensor> tensors,
    std::chrono::milliseconds timeout,
    std::function<void(GroupLinks&)> run) {
  auto opTimeout = timeoutFor(timeout);
  std::lock_guard<std::mutex> guard(mutex_);
  uint64_t seq = nextSeq_++;
  // Ops ahead in the queue each take at most their own timeout, plus up to
  // 1 s asking which ranks had not joined (explainTimeout): the op's own,
  // typed timeout error must not lose the race against this bound.
  auto waitBound = (opTimeout + std::chrono::seconds(1)) * static_cast<int64_t>(queue_.size() + 1) + std::chrono::seconds(1);
  auto work = c10::make_intrusive<MonarchWork>(rank_, type, seq, std::move(outputs), waitBound);
  Status broken;
  if (links_->channel().errored(&broken) || stopping_) {
    Status status = broken.ok() ? Status::error(ErrorKind::kAborted, {}, "the group is shut down") : broken;
    status.message = signature.describe() + " (sequence number " + std::to_string(seq) +
        ") refused: the group is broken: " + status.message;
    work->markFailed(status);
    return work;
  }
  auto keepalive = std::make_shared<std::vector<at::Tensor>>(std::move(tensors));
  queue_.push_back(QueuedOp{seq, signature, std::move(run), work, keepalive, opTimeout, ScopedOpGate::take()});
  queueChanged_.notify_one();
  return work;
}

void MonarchBackend::workerLoop(uint64_t generation) {
  workerOf = this;
  while (true) {
    QueuedOp op;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      // A worker that retire() let go (it was stopping its group from a
      // completion callback) may still be here when the next membership is
      // attached: its queue is no longer this worker's.
      queueChanged_.wait(lock, [&] { return stopping_ || generation_ != generation || !queue_.empty(); });
      if (queue_.empty() || generation_ != generation) {
        return;
      }
      op = std::move(queue_.front());
      queue_.pop_front();
    }
    runOp(op);
  }
}

void MonarchBackend::runOp(QueuedOp& op) {
  Status status = error();
  if (status.ok()) {
    auto deadline = Clock::now() + op.timeout;
    links_->beginOp(op.seq, op.signature, deadline, op.keepalive);
    // A peer that left after an earlier op fails the group as this one starts.
    status = error();
    try {
      if (status.ok() && op.gate) {
        status = op.gate(deadline, aborted_);
      }
      if (status.ok()) {
        op.run(*links_);
      }
    } catch (const OpFailure& failure) {
      status = failure.status();
    } catch (const std::exception& e) {
      status = Status::error(ErrorKind::kProtocol, {}, std::string("internal error: ") + e.what());
    }
    links_->endOp(status.ok());
    if (status.ok()) {
      op.work->markSuccess();
      return;
    }
    if (status.kind == ErrorKind::kTimeout) {
      explainTimeout(op, status);
    }
  }
  status.message = "rank " + std::to_string(rank_) + ": " + op.signature.describe() + " (sequence number " +
      std::to_string(op.seq) + ") failed: " + errorKindName(status.kind) + ": " + status.message;
  // The group is broken from now on; the peers learn it from the notice.
  links_->channel().fail(status, /*tellPeers=*/true);
  op.work->markFailed(status);
}

void MonarchBackend::explainTimeout(const QueuedOp& op, Status& status) {
  // Bounded: a hung peer does not answer, and counts as not joined.
  auto deadline = Clock::now() + std::min(options_.heartbeatTimeout / 2, std::chrono::milliseconds(1000));
  std::vector<int> behind = links_->channel().ranksBehind(op.seq, deadline);
  status.ranks = behind;
  status.message = "Timed out after " + std::to_string(op.timeout.count()) + " ms; ranks " + formatRanks(behind) +
      " had not joined this op (" + status.message + ")";
}

Status MonarchBackend::error() {
  Status broken;
  links()->channel().errored(&broken);
  return broken;
}

c10d::ErrorType MonarchBackend::getError() {
  Status status = error();
  return status.ok() ? device_.error() : errorTypeOf(status);
}

void MonarchBackend::interruptWorker() {
  aborted_ = true;
  {
    // Wake the worker if it is waiting on a transfer.
    std::lock_guard<std::mutex> guard(signal_->mutex);
  }
  signal_->cv.notify_all();
}

bool MonarchBackend::retire(const Status& reason, bool leaving) {
  std::deque<QueuedOp> dropped;
  {
    std::lock_guard<std::mutex> guard(mutex_);
    if (stopping_) {
      return false;
    }
    stopping_ = true;
    if (!reason.ok()) {
      dropped.swap(queue_);
    }
  }
  queueChanged_.notify_all();
  if (!reason.ok()) {
    interruptWorker();
    // Peers learn that this rank is gone without waiting for it; one that
    // leaves lets them finish the ops it finished (Channel::leave).
    if (leaving) {
      links_->channel().leave(reason);
    } else {
      links_->channel().fail(reason, /*tellPeers=*/true);
    }
  }
  for (auto& op : dropped) {
    Status status = reason;
    status.message = op.signature.describe() + " (sequence number " + std::to_string(op.seq) + "): " + reason.message;
    op.work->markFailed(status);
  }
  if (worker_.joinable()) {
    if (worker_.get_id() == std::this_thread::get_id()) {
      worker_.detach(); // called from a completion callback on the worker
    } else {
      worker_.join();
    }
  }
  // No op runs any more: the segments can go now rather than with the last
  // reference to this backend.
  links_->releaseSharedMemory();
  links_->channel().fail(Status::error(ErrorKind::kAborted, {}, "the group was shut down"), /*tellPeers=*/false);
  fabric_->channels().release(links_->channel().id());
  return true;
}

void MonarchBackend::stop(const Status& reason, bool releaseEndpoint) {
  {
    std::unique_lock<std::mutex> changing(membershipMutex_, std::defer_lock);
    if (workerOf != this) {
      changing.lock();
      retire(reason);
    } else if (changing.try_lock()) {
      retire(reason);
    }
    // Else a completion callback on the worker stops the group while another
    // thread changes its membership, waiting for this worker to end: that
    // thread retires this membership itself.
  }
  {
    std::lock_guard<std::mutex> guard(mutex_);
    if (!releaseEndpoint || !holdsEndpoint_) {
      return;
    }
    holdsEndpoint_ = false;
  }
  // The last group on the endpoint closes its sockets and stops its threads.
  fabric_->release(/*graceful=*/reason.ok());
}

void MonarchBackend::abort() {
  Status reason = Status::error(ErrorKind::kAborted, {}, "the group was aborted on rank " + std::to_string(rank_));
  interruptWorker();
  device_.abort();
  // A reconfigurable group keeps its endpoint, which its handle names: a
  // reconfigure with a fresh uuid forms the group again on it.
  stop(reason, /*releaseEndpoint=*/!reconfigurable_);
}

void MonarchBackend::shutdown() {
  // Orderly: queued ops run to completion (each bounded by its timeout).
  stop(Status(), /*releaseEndpoint=*/true);
  device_.shutdown();
}

} // namespace monarch
