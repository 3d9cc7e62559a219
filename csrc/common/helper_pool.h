#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace monarch {

// A fixed set of threads that help one caller at a time split a loop (the
// reductions and shared-memory copies of large messages). `threads` counts
// the caller: a pool of 1 has no helper threads and runs everything on the
// caller. The helpers start at the first run() that can use them, so a group
// that never moves a large message holds no extra threads.
class HelperPool {
 public:
  explicit HelperPool(int threads) : threads_(threads < 1 ? 1 : threads) {}
  ~HelperPool();
  HelperPool(const HelperPool&) = delete;
  HelperPool& operator=(const HelperPool&) = delete;

  int threads() const {
    return threads_;
  }

  // Runs task(i) for every i in [0, tasks) on the caller and the helpers;
  // returns once all have finished. One caller at a time.
  void run(size_t tasks, const std::function<void(size_t)>& task);

 private:
  void helperLoop();
  // Takes tasks of the current job until none are left.
  void drain(const std::function<void(size_t)>& task, size_t tasks);

  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable finished_;
  const std::function<void(size_t)>* job_ = nullptr;
  size_t tasks_ = 0;
  std::atomic<size_t> next_{0};
  // Helpers inside the current job: run() returns only when none is, so
  // that no helper can reach into the next job with the old one's task.
  int busy_ = 0;
  uint64_t generation_ = 0;
  bool stopping_ = false;
  const int threads_;
  std::vector<std::thread> helpers_;
};

// Runs work(i) once on every thread of `helpers` (the caller included), or
// once on the caller where there is no pool, for loops in which each thread
// claims its own share. The first exception any thread threw is rethrown on
// the caller once all have finished, so none is left running.
void runOnEveryThread(HelperPool* helpers, const std::function<void(size_t)>& work);

} // namespace monarch
