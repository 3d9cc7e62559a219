// Lifecycle of the GPU backend: communicators, launching an op on a
// communicator's stream, failures, abort, shutdown and shrink. The
// collectives themselves are in nccl_collectives.cc.

#include "gpu/nccl_backend.h"

#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>

#include <thread>

#include "common/logging.h"
#include "contract/errors.h"
#include "gpu/compat.h"

namespace monarch::gpu {

namespace {

// Keeps the caching allocator from handing a tensor's memory to someone else
// before the communicator's stream is done with it.
void recordStream(const at::Tensor& tensor, const c10::cuda::CUDAStream& stream) {
  if (tensor.defined() && tensor.is_cuda() && tensor.storage().data_ptr().get() != nullptr) {
    c10::cuda::CUDACachingAllocator::recordStream(tensor.storage().data_ptr(), stream);
  }
}

std::vector<uint8_t> bytesOf(const std::string& text) {
  return std::vector<uint8_t>(text.begin(), text.end());
}

} // namespace

NcclBackend::NcclBackend(DeviceGroup group)
    : c10d::Backend(group.rank, group.size),
      group_(std::move(group)),
      timeoutMs_(group_.timeout.count()),
      watchdog_([this](const std::shared_ptr<Communicator>& comm, const Status& status) { fail(comm, status); }) {}

NcclBackend::~NcclBackend() {
  shutdown();
  watchdog_.stop();
}

const std::string NcclBackend::getBackendName() const {
  return std::string("monarch-") + kCollectivesName;
}

void NcclBackend::setTimeout(std::chrono::milliseconds timeout) {
  timeoutMs_ = timeout.count();
}

std::chrono::milliseconds NcclBackend::timeoutFor(std::chrono::milliseconds requested) const {
  return requested == c10d::kUnsetTimeout ? std::chrono::milliseconds(timeoutMs_.load()) : requested;
}

Status NcclBackend::error() {
  std::lock_guard<std::mutex> guard(errorMutex_);
  return error_;
}

c10d::ErrorType NcclBackend::getError() {
  return errorTypeOf(error());
}

std::shared_ptr<Communicator> NcclBackend::communicator(c10::DeviceIndex device, int peer) {
  std::string kind =
      peer < 0 ? "group" : "p2p" + std::to_string(std::min(rank_, peer)) + "-" + std::to_string(std::max(rank_, peer));
  std::string name = kind + "/cuda:" + std::to_string(static_cast<int>(device));
  {
    std::lock_guard<std::mutex> guard(commsMutex_);
    auto it = comms_.find(name);
    if (it != comms_.end()) {
      return it->second;
    }
  }
  // Creation waits for the peers, so it runs outside commsMutex_: abort()
  // must reach the communicators that exist meanwhile.
  std::lock_guard<std::mutex> creating(createMutex_);
  {
    std::lock_guard<std::mutex> guard(commsMutex_);
    auto it = comms_.find(name);
    if (it != comms_.end()) {
      return it->second;
    }
  }
  // The n-th communicator of a kind has the same key on every rank, whatever
  // device each rank uses.
  std::string key = kind + "." + std::to_string(created_[kind]++);
  int rank = peer < 0 ? rank_ : (rank_ < peer ? 0 : 1);
  int size = peer < 0 ? size_ : 2;
  auto comm = Communicator::create(
      group_.store, key, rank, size, device, std::chrono::milliseconds(timeoutMs_.load()), cancel_);
  if (cancel_.load()) {
    comm->abort("the group was aborted");
  }
  {
    std::lock_guard<std::mutex> guard(commsMutex_);
    comms_[name] = comm;
  }
  watchdog_.watchCommunicator(comm);
  return comm;
}

c10::intrusive_ptr<c10d::Work> NcclBackend::launch(
    Op op, const std::function<void(GroupCalls&, int peerInComm)>& calls, const std::function<void()>& after) {
  uint64_t seq = ++seq_;
  if (op.peer < 0) {
    ++collectives_;
  }
  auto timeout = timeoutFor(op.timeout);
  auto work = c10::make_intrusive<NcclWork>(
      rank_, op.type, seq, op.name, op.device.index(), op.outputs, op.blockHostOnWait);
  Status broken = error();
  if (!broken.ok()) {
    broken.message = work->description() + " refused: the group is broken: " + broken.message;
    work->markFailed(broken);
    return work;
  }
  std::shared_ptr<Communicator> comm;
  try {
    comm = communicator(op.device.index(), op.peer);
  } catch (const MonarchError& e) {
    Status status = Status::error(e.kind(), e.ranks(), e.what_without_backtrace());
    fail(nullptr, status);
    status.message = work->description() + " failed: " + status.message;
    work->markFailed(status);
    return work;
  }
  int peerInComm = op.peer < 0 ? -1 : (rank_ < op.peer ? 1 : 0);

  c10::cuda::CUDAGuard deviceGuard(op.device.index());
  auto current = c10::cuda::getCurrentCUDAStream(op.device.index());
  const auto& stream = comm->stream();
  for (const auto& tensor : op.outputs) {
    recordStream(tensor, stream);
  }
  for (const auto& tensor : op.keep) {
    recordStream(tensor, stream);
  }
  auto deadline = Clock::now() + timeout;
  Status status;
  {
    // Tensor ops in `after` run on the communicator's stream.
    c10::cuda::CUDAStreamGuard streamGuard(stream);
    // After everything queued on the caller's stream, staging copies included.
    status = comm->run(current, [&](GroupCalls& group) { calls(group, peerInComm); }, deadline);
    if (status.ok() && after) {
      after();
    }
  }
  if (!status.ok()) {
    if (status.kind == ErrorKind::kTimeout) {
      status.message = "Timed out after " + std::to_string(timeout.count()) + " ms while " + kCollectivesName +
          " was taking the op (" + status.message + ")";
    }
    fail(comm, status);
    status.message = work->description() + " failed: " + errorKindName(status.kind) + ": " + status.message;
    work->markFailed(status);
    return work;
  }
  work->launched(comm, deadline, std::move(op.keep));
  watchdog_.watch(work);
  return work;
}

void NcclBackend::fail(const std::shared_ptr<Communicator>& comm, Status status) {
  MONARCH_LOG(kInfo) << "rank " << rank_ << ": GPU group '" << group_.name << "' failing: " << status.message;
  if (status.kind == ErrorKind::kTimeout && status.ranks.empty()) {
    explainTimeout(status);
  }
  {
    std::lock_guard<std::mutex> guard(errorMutex_);
    if (error_.ok()) {
      error_ = status;
      MONARCH_LOG(kWarn) << "rank " << rank_ << ": GPU group '" << group_.name << "' is broken: " << status.message;
    }
  }
  watchdog_.failPending(comm.get(), status);
  if (comm) {
    // Lets kernels stuck waiting for a peer exit, so no stream stays blocked.
    comm->abort(status.message);
  }
}

void NcclBackend::explainTimeout(Status& status) {
  if (!group_.store || size_ <= 1) {
    return;
  }
  // Every rank that times out publishes how many GPU ops it had issued;
  // ranks that publish fewer, or nothing within a second, are behind.
  uint64_t issued = seq_.load();
  std::vector<int> behind;
  try {
    group_.store->set("issued/" + std::to_string(rank_), bytesOf(std::to_string(issued)));
    auto deadline = Clock::now() + std::chrono::seconds(1);
    for (int rank = 0; rank < size_; ++rank) {
      if (rank == rank_) {
        continue;
      }
      std::string key = "issued/" + std::to_string(rank);
      while (!group_.store->check({key}) && Clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      if (!group_.store->check({key})) {
        behind.push_back(rank);
        continue;
      }
      auto value = group_.store->get(key);
      if (std::stoull(std::string(value.begin(), value.end())) < issued) {
        behind.push_back(rank);
      }
    }
  } catch (const std::exception& e) {
    MONARCH_LOG(kDebug) << "could not compare progress through the store: " << e.what();
    return;
  }
  status.ranks = behind;
  status.message += "; ranks " + formatRanks(behind) + " had not issued it";
}

void NcclBackend::abort() {
  cancel_ = true;
  stopped_ = true;
  Status status = Status::error(ErrorKind::kAborted, {}, "the group was aborted on rank " + std::to_string(rank_));
  {
    std::lock_guard<std::mutex> guard(errorMutex_);
    if (error_.ok()) {
      error_ = status;
    }
  }
  // Pending ops fail at once; the communicators are then released, each
  // bounded, so abort() returns even with a collective stuck on the GPU.
  watchdog_.failPending(nullptr, status);
  std::map<std::string, std::shared_ptr<Communicator>> comms;
  {
    std::lock_guard<std::mutex> guard(commsMutex_);
    comms = comms_;
  }
  for (auto& [name, comm] : comms) {
    comm->abort(status.message);
  }
}

void NcclBackend::shutdown() {
  if (stopped_.exchange(true)) {
    return;
  }
  // Orderly: pending ops finish or time out (the watchdog bounds each).
  Clock::time_point last = Clock::now();
  for (const auto& work : watchdog_.pending()) {
    last = std::max(last, work->deadline());
  }
  watchdog_.waitIdle(last + std::chrono::seconds(2));
  {
    std::lock_guard<std::mutex> guard(errorMutex_);
    if (error_.ok()) {
      error_ = Status::error(ErrorKind::kAborted, {}, "the group was shut down");
    }
  }
  watchdog_.failPending(nullptr, error());
  std::map<std::string, std::shared_ptr<Communicator>> comms;
  {
    std::lock_guard<std::mutex> guard(commsMutex_);
    comms.swap(comms_);
  }
  for (auto& [name, comm] : comms) {
    comm->destroy();
  }
}

c10::intrusive_ptr<c10d::Backend> NcclBackend::shrink(
    const std::vector<int64_t>& ranksToExclude,
    int shrinkFlags,
    const c10::intrusive_ptr<c10d::Backend::Options>& optsOverride) {
  uint64_t generation;
  {
    std::lock_guard<std::mutex> guard(createMutex_);
    generation = ++shrinks_;
  }
  DeviceGroup child = shrunkGroup(group_, ranksToExclude, generation);
  child.timeout = optsOverride ? optsOverride->timeout : std::chrono::milliseconds(timeoutMs_.load());
  return shrinkInto(std::move(child), ranksToExclude, shrinkFlags);
}

c10::intrusive_ptr<NcclBackend> NcclBackend::shrinkInto(
    DeviceGroup child, const std::vector<int64_t>& excluded, int shrinkFlags) {
  std::vector<int> ranks(excluded.begin(), excluded.end());
  auto timeout = child.timeout;
  auto shrunk = c10::make_intrusive<NcclBackend>(std::move(child));
  std::map<std::string, std::shared_ptr<Communicator>> comms;
  {
    std::lock_guard<std::mutex> guard(commsMutex_);
    comms = comms_;
  }
  for (auto& [name, comm] : comms) {
    // Only whole-group communicators shrink; pairs are remade on demand.
    if (name.rfind("group/", 0) != 0 || comm->aborted()) {
      continue;
    }
    auto smaller = comm->shrink(ranks, shrinkFlags != 0, timeout);
    if (smaller) {
      std::lock_guard<std::mutex> guard(shrunk->commsMutex_);
      shrunk->comms_[name] = smaller;
      shrunk->watchdog_.watchCommunicator(smaller);
    }
  }
  MONARCH_LOG(kInfo) << "rank " << rank_ << ": GPU group '" << group_.name << "' shrunk to " << shrunk->size_
                     << " ranks (" << shrunk->comms_.size() << " communicator(s) through ncclCommShrink)";
  return shrunk;
}

} // namespace monarch::gpu
