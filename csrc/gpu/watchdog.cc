#include "gpu/watchdog.h"

#include <algorithm>

#include "common/logging.h"

namespace monarch::gpu {

namespace {

// How often pending ops are checked: this bounds how late a future completes.
constexpr auto kBusyPoll = std::chrono::microseconds(200);
// How often communicators are asked for asynchronous errors, busy or idle:
// detection in tens of milliseconds is plenty, and NCCL is left alone.
constexpr auto kIdlePoll = std::chrono::milliseconds(100);
constexpr auto kErrorPoll = std::chrono::milliseconds(10);

} // namespace

Watchdog::Watchdog(FailureHandler onFailure) : onFailure_(std::move(onFailure)) {
  thread_ = std::thread([this] { loop(); });
}

Watchdog::~Watchdog() {
  stop();
}

void Watchdog::watch(c10::intrusive_ptr<NcclWork> work) {
  {
    std::lock_guard<std::mutex> guard(mutex_);
    pending_.push_back(std::move(work));
  }
  changed_.notify_all();
}

void Watchdog::watchCommunicator(std::shared_ptr<Communicator> comm) {
  std::lock_guard<std::mutex> guard(mutex_);
  comms_.push_back(comm);
}

void Watchdog::failPending(const Communicator* comm, const Status& status) {
  std::vector<c10::intrusive_ptr<NcclWork>> failed;
  {
    std::lock_guard<std::mutex> guard(mutex_);
    auto split = std::stable_partition(pending_.begin(), pending_.end(), [&](const auto& work) {
      return comm != nullptr && work->communicator().get() != comm;
    });
    failed.assign(split, pending_.end());
    pending_.erase(split, pending_.end());
  }
  for (auto& work : failed) {
    Status mine = status;
    mine.message = work->description() + " failed: " + errorKindName(status.kind) + ": " + status.message;
    work->markFailed(mine);
  }
  changed_.notify_all();
}

bool Watchdog::waitIdle(Clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mutex_);
  return changed_.wait_until(lock, deadline, [&] { return pending_.empty(); });
}

std::vector<c10::intrusive_ptr<NcclWork>> Watchdog::pending() {
  std::lock_guard<std::mutex> guard(mutex_);
  return pending_;
}

void Watchdog::stop() {
  {
    std::lock_guard<std::mutex> guard(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  if (thread_.joinable()) {
    if (thread_.get_id() == std::this_thread::get_id()) {
      thread_.detach(); // stopped from a future callback on this thread
    } else {
      thread_.join();
    }
  }
}

void Watchdog::loop() {
  std::vector<c10::intrusive_ptr<NcclWork>> works;
  std::vector<std::shared_ptr<Communicator>> comms;
  auto lastErrorPoll = Clock::now();
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      if (pending_.empty()) {
        changed_.wait_for(lock, kIdlePoll, [&] { return stopping_ || !pending_.empty(); });
      } else {
        changed_.wait_for(lock, kBusyPoll, [&] { return stopping_; });
      }
      if (stopping_) {
        return;
      }
      works = pending_;
      comms.clear();
      for (auto it = comms_.begin(); it != comms_.end();) {
        if (auto comm = it->lock()) {
          comms.push_back(std::move(comm));
          ++it;
        } else {
          it = comms_.erase(it);
        }
      }
    }
    // Errors first: an op whose communicator failed must not pass as done.
    if (Clock::now() - lastErrorPoll < kErrorPoll) {
      comms.clear();
    } else {
      lastErrorPoll = Clock::now();
    }
    for (const auto& comm : comms) {
      if (comm->aborted()) {
        continue;
      }
      Status status = comm->asyncError();
      if (!status.ok()) {
        MONARCH_LOG(kWarn) << "communicator on device " << static_cast<int>(comm->device()) << ": " << status.message;
        onFailure_(comm, status);
      }
    }
    auto now = Clock::now();
    std::vector<NcclWork*> done;
    for (const auto& work : works) {
      if (work->finished()) {
        done.push_back(work.get());
      } else if (work->gpuDone()) {
        work->markSuccess();
        done.push_back(work.get());
      } else if (now > work->deadline()) {
        // The handler fails every op of the communicator, this one included.
        onFailure_(
            work->communicator(),
            Status::error(ErrorKind::kTimeout, {}, "Timed out waiting for " + work->description() + ": not done by its deadline"));
        done.push_back(work.get());
      }
    }
    if (!done.empty()) {
      {
        std::lock_guard<std::mutex> guard(mutex_);
        pending_.erase(
            std::remove_if(
                pending_.begin(), pending_.end(),
                [&](const auto& work) { return std::find(done.begin(), done.end(), work.get()) != done.end(); }),
            pending_.end());
      }
      changed_.notify_all();
    }
    works.clear();
    comms.clear();
  }
}

} // namespace monarch::gpu
