#include "transport/event_loop.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace monarch {

EventLoop::EventLoop()
    : epoll_(::epoll_create1(EPOLL_CLOEXEC)), wakeup_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
  if (!epoll_.valid() || !wakeup_.valid()) {
    throw std::runtime_error(std::string("event loop setup failed: ") + std::strerror(errno));
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = wakeup_.fd();
  ::epoll_ctl(epoll_.fd(), EPOLL_CTL_ADD, wakeup_.fd(), &ev);
  thread_ = std::thread([this] { run(); });
}

EventLoop::~EventLoop() {
  stop();
}

void EventLoop::setTicker(std::chrono::milliseconds interval, std::function<void()> tick) {
  {
    std::lock_guard<std::mutex> guard(mutex_);
    tickInterval_ = interval;
    tick_ = std::move(tick);
    nextTick_ = Clock::now() + interval;
  }
  // Wake the loop so it starts timing out on the new interval.
  uint64_t one = 1;
  (void)!::write(wakeup_.fd(), &one, sizeof(one));
}

void EventLoop::add(int fd, uint32_t events, Handler handler) {
  {
    std::lock_guard<std::mutex> guard(mutex_);
    handlers_[fd] = std::make_shared<Handler>(std::move(handler));
  }
  epoll_event ev{};
  ev.events = events;
  ev.data.fd = fd;
  ::epoll_ctl(epoll_.fd(), EPOLL_CTL_ADD, fd, &ev);
}

void EventLoop::modify(int fd, uint32_t events) {
  epoll_event ev{};
  ev.events = events;
  ev.data.fd = fd;
  ::epoll_ctl(epoll_.fd(), EPOLL_CTL_MOD, fd, &ev);
}

void EventLoop::remove(int fd) {
  ::epoll_ctl(epoll_.fd(), EPOLL_CTL_DEL, fd, nullptr);
  std::lock_guard<std::mutex> guard(mutex_);
  handlers_.erase(fd);
}

void EventLoop::stop() {
  {
    std::lock_guard<std::mutex> guard(mutex_);
    if (stopping_) {
      return;
    }
    stopping_ = true;
  }
  uint64_t one = 1;
  (void)!::write(wakeup_.fd(), &one, sizeof(one));
  if (thread_.joinable()) {
    thread_.join();
  }
}

void EventLoop::run() {
  constexpr int kMaxEvents = 64;
  epoll_event events[kMaxEvents];
  while (true) {
    int timeoutMs = -1;
    std::function<void()> tick;
    {
      std::lock_guard<std::mutex> guard(mutex_);
      if (stopping_) {
        return;
      }
      if (tick_) {
        auto now = Clock::now();
        if (now >= nextTick_) {
          tick = tick_;
          nextTick_ = now + tickInterval_;
        }
        timeoutMs = static_cast<int>(
            std::chrono::duration_cast<std::chrono::milliseconds>(nextTick_ - now).count()) + 1;
      }
    }
    if (tick) {
      tick();
    }
    int n = ::epoll_wait(epoll_.fd(), events, kMaxEvents, timeoutMs);
    if (n < 0 && errno != EINTR) {
      return;
    }
    for (int i = 0; i < n; ++i) {
      if (events[i].data.fd == wakeup_.fd()) {
        uint64_t drained;
        (void)!::read(wakeup_.fd(), &drained, sizeof(drained));
        continue;
      }
      std::shared_ptr<Handler> handler;
      {
        std::lock_guard<std::mutex> guard(mutex_);
        auto it = handlers_.find(events[i].data.fd);
        if (it == handlers_.end()) {
          continue; // removed after epoll_wait returned
        }
        handler = it->second;
      }
      (*handler)(events[i].events);
    }
  }
}

} // namespace monarch
