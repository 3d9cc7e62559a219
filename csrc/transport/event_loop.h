#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "transport/socket.h"

namespace monarch {

// One epoll thread that drives the connections of an endpoint.
class EventLoop {
 public:
  using Handler = std::function<void(uint32_t events)>;

  EventLoop();
  ~EventLoop(); // stops the thread

  void add(int fd, uint32_t events, Handler handler);
  void modify(int fd, uint32_t events);
  // Stops delivering events for `fd`; a handler call already running finishes.
  void remove(int fd);
  void stop();

 private:
  void run();

  Socket epoll_;
  Socket wakeup_; // eventfd that stop() writes
  std::mutex mutex_; // guards handlers_ and stopping_
  std::unordered_map<int, std::shared_ptr<Handler>> handlers_;
  std::thread thread_;
  bool stopping_ = false;
};

} // namespace monarch
