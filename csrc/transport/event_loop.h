#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "transport/socket.h"

namespace monarch {

// One epoll thread that drives the connections of a Fabric.
class EventLoop {
 public:
  using Handler = std::function<void(uint32_t events)>;

  EventLoop();
  ~EventLoop(); // stops the thread

  // Calls `tick` on the loop thread about every `interval`.
  void setTicker(std::chrono::milliseconds interval, std::function<void()> tick);

  void add(int fd, uint32_t events, Handler handler);
  void modify(int fd, uint32_t events);
  // Stops delivering events for `fd`; a handler call already running finishes.
  void remove(int fd);
  void stop();
  bool onLoopThread() const {
    return std::this_thread::get_id() == thread_.get_id();
  }

 private:
  void run();

  Socket epoll_;
  Socket wakeup_; // eventfd that stop() writes
  std::mutex mutex_; // guards handlers_ and stopping_
  std::unordered_map<int, std::shared_ptr<Handler>> handlers_;
  std::thread thread_;
  bool stopping_ = false;
  std::chrono::milliseconds tickInterval_{0}; // guarded by mutex_
  std::function<void()> tick_;
  Deadline nextTick_;
};

} // namespace monarch
