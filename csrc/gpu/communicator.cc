#include "gpu/communicator.h"

#include <c10/cuda/CUDAGuard.h>

#include <algorithm>
#include <cstring>
#include <future>
#include <thread>

#include "common/logging.h"
#include "contract/errors.h"
#include "gpu/compat.h"

namespace monarch::gpu {

namespace {

// How long abort() and destroy() wait for NCCL before leaving the call to a
// detached thread.
constexpr auto kReleaseBound = std::chrono::seconds(10);

const NcclApi& nccl() {
  return NcclLibrary::get().api();
}

// Runs `fn` on a detached thread; true if it returned within `bound`.
bool runBounded(std::function<void()> fn, std::chrono::milliseconds bound) {
  auto finished = std::make_shared<std::promise<void>>();
  auto done = finished->get_future();
  std::thread([fn = std::move(fn), finished] {
    fn();
    finished->set_value();
  }).detach();
  return done.wait_for(bound) == std::future_status::ready;
}

// Backs off from spinning to sleeping while polling NCCL: enqueueing usually
// finishes within microseconds, connection setup can take seconds.
void pause(int round) {
  if (round < 100) {
    std::this_thread::yield();
  } else if (round < 2000) {
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  } else {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

std::vector<uint8_t> bytesOf(const std::string& text) {
  return std::vector<uint8_t>(text.begin(), text.end());
}

// Ranks whose arrival key is missing under `key`; bounded by the store's
// own timeouts, best effort.
std::vector<int> ranksNotArrived(const c10::intrusive_ptr<c10d::Store>& store, const std::string& key, int size) {
  std::vector<int> missing;
  for (int rank = 0; rank < size; ++rank) {
    try {
      if (!store->check({key + "/arrived/" + std::to_string(rank)})) {
        missing.push_back(rank);
      }
    } catch (const std::exception&) {
      missing.push_back(rank); // the store itself is gone with its host
    }
  }
  return missing;
}

std::string deviceName(c10::DeviceIndex device) {
  return "cuda:" + std::to_string(static_cast<int>(device));
}

} // namespace

NcclReduction GroupCalls::reduction(const at::Tensor& tensor, const c10d::ReduceOp& op) {
  try {
    NcclReduction made = makeReduction(tensor, op, comm_);
    if (made.custom) {
      custom_.push_back(made);
    }
    return made;
  } catch (const std::exception& e) {
    MONARCH_LOG(kError) << "could not create the reduction op: " << e.what();
    check(ncclInternalError);
    return NcclReduction{};
  }
}

void GroupCalls::check(ncclResult_t result) {
  if (result != ncclSuccess && result != ncclInProgress && (result_ == ncclSuccess || result_ == ncclInProgress)) {
    result_ = result;
  }
}

// Empty transfers are skipped on every rank alike (sizes agree across ranks).
void GroupCalls::allReduce(const void* send, void* recv, size_t count, const NcclReduction& reduction) {
  if (count == 0) {
    return;
  }
  check(nccl().allReduce(send, recv, count, reduction.type, reduction.op, comm_, stream_));
}

void GroupCalls::broadcast(const void* send, void* recv, size_t bytes, int root) {
  if (bytes == 0) {
    return;
  }
  check(nccl().broadcast(send, recv, bytes, ncclUint8, root, comm_, stream_));
}

void GroupCalls::reduce(const void* send, void* recv, size_t count, const NcclReduction& reduction, int root) {
  if (count == 0) {
    return;
  }
  check(nccl().reduce(send, recv, count, reduction.type, reduction.op, root, comm_, stream_));
}

void GroupCalls::allGather(const void* send, void* recv, size_t bytesPerRank) {
  if (bytesPerRank == 0) {
    return;
  }
  check(nccl().allGather(send, recv, bytesPerRank, ncclUint8, comm_, stream_));
}

void GroupCalls::reduceScatter(const void* send, void* recv, size_t countPerRank, const NcclReduction& reduction) {
  if (countPerRank == 0) {
    return;
  }
  check(nccl().reduceScatter(send, recv, countPerRank, reduction.type, reduction.op, comm_, stream_));
}

void GroupCalls::send(const void* buffer, size_t bytes, int peer) {
  if (bytes == 0) {
    return;
  }
  check(nccl().send(buffer, bytes, ncclUint8, peer, comm_, stream_));
}

void GroupCalls::recv(void* buffer, size_t bytes, int peer) {
  if (bytes == 0) {
    return;
  }
  check(nccl().recv(buffer, bytes, ncclUint8, peer, comm_, stream_));
}

Communicator::Communicator(ncclComm_t comm, c10::DeviceIndex device, int rank, int size)
    : device_(device),
      rank_(rank),
      size_(size),
      // A high-priority stream of its own: collectives are not queued behind
      // the caller's compute, only ordered after the inputs they need.
      stream_(c10::cuda::getStreamFromPool(/*isHighPriority=*/true, device)),
      comm_(comm) {}

Communicator::~Communicator() {
  if (!aborted_.load()) {
    abort("the communicator was dropped");
  }
}

std::shared_ptr<Communicator> Communicator::create(
    const c10::intrusive_ptr<c10d::Store>& store,
    const std::string& key,
    int rank,
    int size,
    c10::DeviceIndex device,
    std::chrono::milliseconds timeout,
    const std::atomic<bool>& cancel) {
  const auto& library = NcclLibrary::get();
  auto deadline = Clock::now() + timeout;
  std::string where = "rank " + std::to_string(rank) + ": creating the " + kCollectivesName + " communicator on " +
      deviceName(device);
  auto timedOut = [&](const std::string& detail) {
    auto missing = ranksNotArrived(store, key, size);
    return MonarchError(
        ErrorKind::kTimeout, missing,
        where + ": Timed out after " + std::to_string(timeout.count()) + " ms; ranks " + formatRanks(missing) +
            " had not arrived (" + detail + ")");
  };

  store->set(key + "/arrived/" + std::to_string(rank), bytesOf("1"));
  ncclUniqueId id;
  std::string idKey = key + "/id";
  if (rank == 0) {
    ncclResult_t result = library.api().getUniqueId(&id);
    if (result != ncclSuccess) {
      throw MonarchError(ErrorKind::kPeerFailure, {}, where + ": ncclGetUniqueId: " + library.describe(result));
    }
    store->set(idKey, std::vector<uint8_t>(reinterpret_cast<uint8_t*>(&id), reinterpret_cast<uint8_t*>(&id) + sizeof(id)));
  } else {
    // Polled rather than store->wait(): abort() must be able to cut it short.
    for (int round = 0; !store->check({idKey}); ++round) {
      if (cancel.load()) {
        throw MonarchError(ErrorKind::kAborted, {}, where + ": aborted while waiting for rank 0");
      }
      if (Clock::now() > deadline) {
        throw timedOut("waiting for rank 0 to publish the communicator id");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(round < 100 ? 1 : 10));
    }
    auto bytes = store->get(idKey);
    TORCH_CHECK(bytes.size() == sizeof(id), where, ": the published communicator id has ", bytes.size(), " bytes");
    std::memcpy(&id, bytes.data(), sizeof(id));
  }

  c10::cuda::CUDAGuard guard(device);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0; // init returns at once; readiness is polled below
  // NCCL's init job stores the handle through this pointer again when it
  // ends, on its own thread, possibly after we gave up waiting: the slot
  // must outlive the job, so it is freed only once init has completed.
  auto* slot = new ncclComm_t(nullptr);
  ncclResult_t result = library.api().commInitRankConfig(slot, size, id, rank, &config);
  ncclComm_t comm = __atomic_load_n(slot, __ATOMIC_ACQUIRE); // set at once by a non-blocking init
  if (comm == nullptr) {
    throw MonarchError(ErrorKind::kPeerFailure, {}, where + ": " + library.describe(result));
  }
  std::shared_ptr<Communicator> communicator(new Communicator(comm, device, rank, size));
  Status status = communicator->waitReady(result, deadline, "init", &cancel);
  if (status.ok()) {
    delete slot; // the job has finished: NCCL reports success after its last store
  }
  if (!status.ok()) {
    communicator->abort(status.message);
    if (status.kind == ErrorKind::kTimeout) {
      throw timedOut("every rank that arrived was still connecting");
    }
    throw MonarchError(status.kind, status.ranks, where + ": " + status.message);
  }
  MONARCH_LOG(kInfo) << where << ": ready (" << size << " ranks, " << kCollectivesName << " " << library.version()
                     << ")";
  return communicator;
}

std::shared_ptr<Communicator> Communicator::shrink(
    const std::vector<int>& excluded, bool abortPending, std::chrono::milliseconds timeout) {
  const auto& api = nccl();
  if (api.commShrink == nullptr) {
    return nullptr;
  }
  std::lock_guard<std::mutex> issue(issueMutex_);
  std::vector<int> ranks = excluded;
  // A non-blocking shrink runs as a job of the parent communicator, which
  // stores the new handle through this pointer when it is done; until then
  // the parent reports ncclInProgress. The slot must outlive the job.
  auto* slot = new ncclComm_t(nullptr);
  ncclResult_t result;
  {
    std::lock_guard<std::mutex> guard(handleMutex_);
    if (comm_ == nullptr) {
      delete slot;
      return nullptr; // aborted after a failure: nothing left to shrink
    }
    c10::cuda::CUDAGuard device(device_);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    result = api.commShrink(
        comm_, ranks.data(), static_cast<int>(ranks.size()), slot, &config, abortPending ? NCCL_SHRINK_ABORT : 0);
  }
  Status status = waitReady(result, Clock::now() + timeout, "shrink", nullptr);
  ncclComm_t child = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
  if (!status.ok() || child == nullptr) {
    MONARCH_LOG(kWarn) << "ncclCommShrink did not complete (" << (status.ok() ? "no communicator" : status.message)
                       << "); rebuilding instead";
    return nullptr; // the slot stays: the job may still store into it
  }
  delete slot;
  int newRank = rank_ - static_cast<int>(std::count_if(ranks.begin(), ranks.end(), [&](int r) { return r < rank_; }));
  std::shared_ptr<Communicator> shrunk(
      new Communicator(child, device_, newRank, size_ - static_cast<int>(ranks.size())));
  // The new communicator may still be connecting.
  status = shrunk->waitReady(ncclInProgress, Clock::now() + timeout, "shrink", nullptr);
  if (!status.ok()) {
    MONARCH_LOG(kWarn) << "the shrunk communicator did not come up (" << status.message << "); rebuilding instead";
    shrunk->abort(status.message);
    return nullptr;
  }
  return shrunk;
}

Status Communicator::run(
    const c10::cuda::CUDAStream& caller,
    const std::function<void(GroupCalls&)>& calls,
    Clock::time_point deadline) {
  const auto& api = nccl();
  std::lock_guard<std::mutex> issue(issueMutex_);
  // A wait on the stream captures the event as recorded now, so one event
  // serves every op.
  ready_.record(caller);
  ready_.block(stream_);
  ncclResult_t ended;
  std::vector<NcclReduction> custom;
  {
    std::lock_guard<std::mutex> guard(handleMutex_);
    if (comm_ == nullptr) {
      return Status::error(ErrorKind::kAborted, {}, "the communicator was aborted: " + abortReason_);
    }
    GroupCalls group(comm_, stream_.stream());
    api.groupStart();
    calls(group);
    ended = api.groupEnd();
    custom = group.customReductions();
    if (group.result() != ncclSuccess && group.result() != ncclInProgress) {
      return failure(group.result(), "enqueue", comm_);
    }
  }
  Status status = waitReady(ended, deadline, "enqueue", nullptr);
  std::lock_guard<std::mutex> guard(handleMutex_);
  for (const auto& reduction : custom) {
    if (comm_ != nullptr) {
      releaseReduction(reduction, comm_); // legal once the group is enqueued
    }
  }
  return status;
}

Status Communicator::waitReady(
    ncclResult_t first, Clock::time_point deadline, const char* what, const std::atomic<bool>* cancel) {
  if (first == ncclSuccess) {
    return Status();
  }
  if (first != ncclInProgress) {
    std::lock_guard<std::mutex> guard(handleMutex_);
    return failure(first, what, comm_);
  }
  for (int round = 0;; ++round) {
    ncclResult_t state = ncclInProgress;
    {
      std::lock_guard<std::mutex> guard(handleMutex_);
      if (comm_ == nullptr) {
        return Status::error(ErrorKind::kAborted, {}, "the communicator was aborted: " + abortReason_);
      }
      ncclResult_t result = nccl().commGetAsyncError(comm_, &state);
      if (result != ncclSuccess) {
        return failure(result, what, comm_);
      }
      if (state != ncclSuccess && state != ncclInProgress) {
        return failure(state, what, comm_);
      }
    }
    if (state == ncclSuccess) {
      return Status();
    }
    if (cancel != nullptr && cancel->load()) {
      return Status::error(ErrorKind::kAborted, {}, std::string(what) + " was aborted");
    }
    if (Clock::now() > deadline) {
      return Status::error(ErrorKind::kTimeout, {}, std::string(what) + " did not complete in time");
    }
    pause(round);
  }
}

Status Communicator::failure(ncclResult_t result, const char* what, ncclComm_t comm) {
  return Status::error(
      ErrorKind::kPeerFailure, {}, std::string(kCollectivesName) + " " + what + " failed: " +
          NcclLibrary::get().describe(result, comm));
}

Status Communicator::asyncError() {
  std::lock_guard<std::mutex> guard(handleMutex_);
  if (comm_ == nullptr) {
    return Status();
  }
  ncclResult_t state = ncclSuccess;
  ncclResult_t result = nccl().commGetAsyncError(comm_, &state);
  if (result != ncclSuccess) {
    return failure(result, "error query", comm_);
  }
  if (state != ncclSuccess && state != ncclInProgress) {
    return failure(state, "communicator", comm_);
  }
  return Status();
}

ncclComm_t Communicator::release(const std::string& why) {
  std::lock_guard<std::mutex> guard(handleMutex_);
  ncclComm_t comm = comm_;
  comm_ = nullptr;
  if (!aborted_.exchange(true)) {
    abortReason_ = why;
  }
  return comm;
}

void Communicator::abort(const std::string& why) {
  ncclComm_t comm = release(why);
  if (comm == nullptr) {
    return;
  }
  MONARCH_LOG(kInfo) << "aborting the " << kCollectivesName << " communicator on " << deviceName(device_) << " (rank "
                     << rank_ << "/" << size_ << "): " << why;
  c10::DeviceIndex device = device_;
  bool returned = runBounded(
      [comm, device] {
        c10::cuda::CUDAGuard guard(device);
        nccl().commAbort(comm);
      },
      kReleaseBound);
  if (!returned) {
    MONARCH_LOG(kWarn) << "ncclCommAbort did not return within " << kReleaseBound.count()
                       << " s; it goes on on a detached thread";
  }
}

void Communicator::destroy() {
  ncclComm_t comm = release("the communicator was destroyed");
  if (comm == nullptr) {
    return;
  }
  c10::DeviceIndex device = device_;
  bool returned = runBounded(
      [comm, device] {
        c10::cuda::CUDAGuard guard(device);
        const auto& api = nccl();
        // Finalize flushes outstanding work; on a non-blocking communicator
        // it completes asynchronously. Abort if it fails or stalls.
        ncclResult_t result = api.commFinalize(comm);
        ncclResult_t state = result;
        auto deadline = Clock::now() + kReleaseBound / 2;
        for (int round = 0; state == ncclInProgress && Clock::now() < deadline; ++round) {
          if (api.commGetAsyncError(comm, &state) != ncclSuccess) {
            break;
          }
          pause(round);
        }
        if (state == ncclSuccess) {
          api.commDestroy(comm);
        } else {
          api.commAbort(comm);
        }
      },
      kReleaseBound);
  if (!returned) {
    MONARCH_LOG(kWarn) << "destroying the " << kCollectivesName << " communicator did not finish within "
                       << kReleaseBound.count() << " s; it goes on on a detached thread";
  }
}

} // namespace monarch::gpu
