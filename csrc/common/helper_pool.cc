#include "common/helper_pool.h"

#include <exception>

namespace monarch {

HelperPool::~HelperPool() {
  {
    std::lock_guard<std::mutex> guard(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (auto& helper : helpers_) {
    helper.join();
  }
}

void HelperPool::run(size_t tasks, const std::function<void(size_t)>& task) {
  if (threads_ == 1 || tasks < 2) {
    for (size_t i = 0; i < tasks; ++i) {
      task(i);
    }
    return;
  }
  while (static_cast<int>(helpers_.size()) + 1 < threads_) {
    helpers_.emplace_back([this] { helperLoop(); });
  }
  {
    std::lock_guard<std::mutex> guard(mutex_);
    job_ = &task;
    tasks_ = tasks;
    next_ = 0;
    ++generation_;
  }
  wake_.notify_all();
  drain(task, tasks);
  std::unique_lock<std::mutex> lock(mutex_);
  job_ = nullptr; // helpers that wake from now on find nothing to do
  finished_.wait(lock, [&] { return busy_ == 0; });
}

void HelperPool::drain(const std::function<void(size_t)>& task, size_t tasks) {
  for (size_t i = next_.fetch_add(1); i < tasks; i = next_.fetch_add(1)) {
    task(i);
  }
}

void HelperPool::helperLoop() {
  uint64_t seen = 0;
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    wake_.wait(lock, [&] { return stopping_ || generation_ != seen; });
    if (stopping_) {
      return;
    }
    seen = generation_;
    if (job_ == nullptr) {
      continue; // woke after the caller had done the whole job itself
    }
    const auto* task = job_;
    size_t tasks = tasks_;
    ++busy_;
    lock.unlock();
    drain(*task, tasks);
    lock.lock();
    if (--busy_ == 0) {
      finished_.notify_all();
    }
  }
}

void runOnEveryThread(HelperPool* helpers, const std::function<void(size_t)>& work) {
  std::mutex mutex;
  std::exception_ptr failure;
  auto guarded = [&](size_t i) {
    try {
      work(i);
    } catch (...) {
      std::lock_guard<std::mutex> guard(mutex);
      if (!failure) {
        failure = std::current_exception();
      }
    }
  };
  if (helpers) {
    helpers->run(static_cast<size_t>(helpers->threads()), guarded);
  } else {
    guarded(0);
  }
  if (failure) {
    std::rethrow_exception(failure);
  }
}

} // namespace monarch
