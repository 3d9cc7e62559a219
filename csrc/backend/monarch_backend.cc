// Lifecycle of the monarch backend: rendezvous, the worker thread that runs
// collectives in order, failure bookkeeping, abort and shutdown. The
// collectives themselves are in collective_ops.cc and point_to_point.cc.

#include "backend/monarch_backend.h"

#include "backend/errors.h"
#include "backend/store_adapter.h"
#include "common/logging.h"
#include "common/op_failure.h"

namespace monarch {

MonarchBackend::MonarchBackend(
    const c10::intrusive_ptr<c10d::Store>& store,
    int rank,
    int size,
    const std::string& groupName,
    BackendOptions options)
    : c10d::Backend(rank, size),
      options_(std::move(options)),
      signal_(std::make_shared<CompletionSignal>()),
      timeoutMs_(options_.timeout.count()) {
  const std::string address = options_.bindAddress.empty() ? defaultBindAddress() : options_.bindAddress;
  GroupIdentity identity;
  identity.groupHash = fnv1a64(groupName.data(), groupName.size());
  identity.rank = rank;
  identity.size = size;
  std::vector<std::shared_ptr<Connection>> connections;
  try {
    fabric_ = std::make_shared<Fabric>(address);
    StoreAdapter adapter(store);
    connections = fabric_->connectGroup(adapter, identity, Clock::now() + options_.timeout);
  } catch (const std::runtime_error& e) {
    fabric_.reset();
    throw MonarchError(
        ErrorKind::kPeerFailure, {},
        "monarch: rank " + std::to_string(rank) + " could not join group '" + groupName + "': " + e.what());
  }
  links_ = std::make_unique<GroupLinks>(
      rank, std::move(connections), fabric_->channels().get(identity.groupHash), signal_, &aborted_);
  worker_ = std::thread([this] { workerLoop(); });
  MONARCH_LOG(kInfo) << "rank " << rank << "/" << size << " joined group '" << groupName << "' at " << address;
  init();
}

MonarchBackend::~MonarchBackend() {
  shutdown();
}

void MonarchBackend::setTimeout(std::chrono::milliseconds timeout) {
  timeoutMs_ = timeout.count();
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
  // Ops ahead in the queue each take at most their own timeout.
  auto waitBound = opTimeout * static_cast<int64_t>(queue_.size() + 1) + std::chrono::seconds(1);
  auto work = c10::make_intrusive<MonarchWork>(rank_, type, seq, std::move(outputs), waitBound);
  if (!error_.ok() || stopping_) {
    Status status = error_.ok() ? Status::error(ErrorKind::kAborted, {}, "the group is shut down") : error_;
    status.message = signature.describe() + " (sequence number " + std::to_string(seq) +
        ") refused: the group is broken: " + status.message;
    work->markFailed(status);
    return work;
  }
  auto keepalive = std::make_shared<std::vector<at::Tensor>>(std::move(tensors));
  queue_.push_back(QueuedOp{seq, signature, std::move(run), work, keepalive, opTimeout});
  queueChanged_.notify_one();
  return work;
}

void MonarchBackend::workerLoop() {
  while (true) {
    QueuedOp op;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      queueChanged_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) {
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
    links_->beginOp(op.seq, op.signature, Clock::now() + op.timeout, op.keepalive);
    try {
      op.run(*links_);
    } catch (const OpFailure& failure) {
      status = failure.status();
    } catch (const std::exception& e) {
      status = Status::error(ErrorKind::kProtocol, {}, std::string("internal error: ") + e.what());
    }
    links_->endOp();
    if (status.ok()) {
      op.work->markSuccess();
      return;
    }
    if (status.kind == ErrorKind::kTimeout) {
      status.message = "timed out after " + std::to_string(op.timeout.count()) + " ms: " + status.message;
    }
  }
  status.message = "rank " + std::to_string(rank_) + ": " + op.signature.describe() + " (sequence number " +
      std::to_string(op.seq) + ") failed: " + errorKindName(status.kind) + ": " + status.message;
  breakGroup(op.seq, status);
  op.work->markFailed(status);
}

void MonarchBackend::breakGroup(uint64_t seq, const Status& status) {
  {
    std::lock_guard<std::mutex> guard(mutex_);
    if (!error_.ok()) {
      return;
    }
    error_ = status;
  }
  MONARCH_LOG(kWarn) << "group broken: " << status.message;
  links_->channel().fail(status);
  links_->broadcastErrorNotice(seq, status);
}

Status MonarchBackend::error() {
  Status broken;
  {
    std::lock_guard<std::mutex> guard(mutex_);
    if (!error_.ok()) {
      return error_;
    }
  }
  // A peer failure or a peer's error notice may have broken the channel
  // between ops.
  if (links_ && links_->channel().errored(&broken)) {
    return broken;
  }
  return {};
}

c10d::ErrorType MonarchBackend::getError() {
  Status status = error();
  switch (status.kind) {
    case ErrorKind::kNone:
      return c10d::ErrorType::SUCCESS;
    case ErrorKind::kTimeout:
      return c10d::ErrorType::TIMEOUT;
    case ErrorKind::kPeerFailure:
      return c10d::ErrorType::REMOTE_ERROR;
    default:
      return c10d::ErrorType::COMM_ERROR;
  }
}

void MonarchBackend::stop(const Status& reason) {
  std::deque<QueuedOp> dropped;
  {
    std::lock_guard<std::mutex> guard(mutex_);
    if (stopping_) {
      return;
    }
    stopping_ = true;
    if (!reason.ok()) {
      dropped.swap(queue_);
      if (error_.ok()) {
        error_ = reason;
      }
    }
  }
  queueChanged_.notify_all();
  for (auto& op : dropped) {
    Status status = reason;
    status.message = op.signature.describe() + " (sequence number " + std::to_string(op.seq) + "): " + reason.message;
    op.work->markFailed(status);
  }
  if (worker_.joinable()) {
    worker_.join();
  }
  if (links_) {
    links_->channel().fail(reason.ok() ? Status::error(ErrorKind::kAborted, {}, "the group was shut down") : reason);
    fabric_->channels().release(links_->channel().id());
    // Closes the sockets and stops the endpoint's threads; the objects live
    // on until the backend is destroyed, so late callers see a failed group.
    fabric_->shutdown(/*graceful=*/reason.ok());
  }
}

void MonarchBackend::abort() {
  aborted_ = true;
  {
    // Wake the worker if it is waiting on a transfer.
    std::lock_guard<std::mutex> guard(signal_->mutex);
  }
  signal_->cv.notify_all();
  stop(Status::error(ErrorKind::kAborted, {}, "the group was aborted on rank " + std::to_string(rank_)));
}

void MonarchBackend::shutdown() {
  // Orderly: queued ops run to completion (each bounded by its timeout).
  stop(Status());
}

} // namespace monarch
