#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace monarch {

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;

// Owns one file descriptor.
class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  Socket(Socket&& other) noexcept : fd_(other.release()) {}
  Socket& operator=(Socket&& other) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  ~Socket();

  int fd() const {
    return fd_;
  }
  bool valid() const {
    return fd_ >= 0;
  }
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void close();

 private:
  int fd_ = -1;
};

// The address other ranks should use to reach this host: MONARCH_BIND_ADDRESS
// if given, else the address the hostname resolves to, else loopback.
std::string defaultBindAddress();

// Listens on `address` at an ephemeral port; returns the socket and the port.
Socket listenOn(const std::string& address, uint16_t* port);

// A connection the peer's host refused: nothing listens at the address.
struct ConnectionRefused : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Connects to host:port. A refused connection is retried until `deadline`
// when `retryRefused` (the peer may not be listening yet), else throws
// ConnectionRefused at once. Throws std::runtime_error on other failures.
Socket connectTo(const std::string& host, uint16_t port, Deadline deadline, bool retryRefused = true);

// Waits until `fd` has one of `events` (POLLIN, POLLOUT) or the deadline
// passes; returns poll()'s count (0 on timeout).
int pollFor(int fd, short events, Deadline deadline);

void setNonBlocking(int fd, bool enabled);
void setNoDelay(int fd);

// Blocking exact-length I/O bounded by a deadline; false on EOF, error or
// timeout with the reason in `error`.
bool readExact(int fd, void* buf, size_t bytes, Deadline deadline, std::string* error);
bool writeExact(int fd, const void* buf, size_t bytes, Deadline deadline, std::string* error);

} // namespace monarch
