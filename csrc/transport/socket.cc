#include "transport/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <thread>

namespace monarch {

Socket& Socket::operator=(Socket&& other) noexcept {
  if (this != &other) {
    close();
    fd_ = other.release();
  }
  return *this;
}

Socket::~Socket() {
  close();
}

void Socket::close() {
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  }
}

namespace {

bool canBind(const sockaddr_in& addr) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    return false;
  }
  sockaddr_in probe = addr;
  probe.sin_port = 0;
  bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&probe), sizeof(probe)) == 0;
  ::close(fd);
  return ok;
}

sockaddr_in parseIpv4(const std::string& host, uint16_t port) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* result = nullptr;
  int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &result);
  if (rc != 0 || result == nullptr) {
    throw std::runtime_error("cannot resolve address '" + host + "': " + gai_strerror(rc));
  }
  sockaddr_in addr = *reinterpret_cast<sockaddr_in*>(result->ai_addr);
  ::freeaddrinfo(result);
  addr.sin_port = htons(port);
  return addr;
}

} // namespace

int pollFor(int fd, short events, Deadline deadline) {
  auto remaining = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  if (remaining.count() <= 0) {
    return 0;
  }
  pollfd pfd{fd, events, 0};
  int rc = ::poll(&pfd, 1, static_cast<int>(remaining.count()) + 1);
  return rc < 0 && errno == EINTR ? 1 : rc;
}

std::string defaultBindAddress() {
  if (const char* env = std::getenv("MONARCH_BIND_ADDRESS")) {
    if (*env) {
      return env;
    }
  }
  char hostname[256] = {0};
  if (::gethostname(hostname, sizeof(hostname) - 1) == 0) {
    try {
      sockaddr_in addr = parseIpv4(hostname, 0);
      if (canBind(addr)) {
        char text[INET_ADDRSTRLEN];
        ::inet_ntop(AF_INET, &addr.sin_addr, text, sizeof(text));
        return text;
      }
    } catch (const std::exception&) {
      // Fall through to loopback: the host name does not resolve here.
    }
  }
  return "127.0.0.1";
}

Socket listenOn(const std::string& address, uint16_t* port) {
  sockaddr_in addr = parseIpv4(address, 0);
  Socket sock(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!sock.valid()) {
    throw std::runtime_error(std::string("socket(): ") + std::strerror(errno));
  }
  if (::bind(sock.fd(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    throw std::runtime_error("bind to " + address + ": " + std::strerror(errno));
  }
  if (::listen(sock.fd(), 128) != 0) {
    throw std::runtime_error(std::string("listen(): ") + std::strerror(errno));
  }
  socklen_t len = sizeof(addr);
  ::getsockname(sock.fd(), reinterpret_cast<sockaddr*>(&addr), &len);
  *port = ntohs(addr.sin_port);
  return sock;
}

Socket connectTo(const std::string& host, uint16_t port, Deadline deadline, bool retryRefused) {
  sockaddr_in addr = parseIpv4(host, port);
  auto backoff = std::chrono::milliseconds(1);
  std::string lastError = "deadline passed";
  while (Clock::now() < deadline) {
    Socket sock(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!sock.valid()) {
      throw std::runtime_error(std::string("socket(): ") + std::strerror(errno));
    }
    setNonBlocking(sock.fd(), true);
    int rc = ::connect(sock.fd(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    if (rc != 0 && errno == EINPROGRESS) {
      if (pollFor(sock.fd(), POLLOUT, deadline) > 0) {
        int err = 0;
        socklen_t len = sizeof(err);
        ::getsockopt(sock.fd(), SOL_SOCKET, SO_ERROR, &err, &len);
        rc = err == 0 ? 0 : -1;
        errno = err;
      } else {
        errno = ETIMEDOUT;
      }
    }
    if (rc == 0) {
      setNonBlocking(sock.fd(), false);
      setNoDelay(sock.fd());
      return sock;
    }
    lastError = std::strerror(errno);
    if (errno == ECONNREFUSED && !retryRefused) {
      throw ConnectionRefused("cannot connect to " + host + ":" + std::to_string(port) + ": " + lastError);
    }
    // The peer publishes its address before it accepts; retry briefly.
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(100));
  }
  throw std::runtime_error(
      "cannot connect to " + host + ":" + std::to_string(port) + ": " + lastError);
}

void setNonBlocking(int fd, bool enabled) {
  int flags = ::fcntl(fd, F_GETFL, 0);
  ::fcntl(fd, F_SETFL, enabled ? (flags | O_NONBLOCK) : (flags & ~O_NONBLOCK));
}

void setNoDelay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

namespace {

// Moves exactly `bytes` through `io` (a non-blocking recv or send), waiting
// for readiness up to `deadline`.
template <typename Io>
bool transferExact(int fd, char* p, size_t bytes, short events, Deadline deadline, std::string* error, Io io) {
  while (bytes > 0) {
    if (pollFor(fd, events, deadline) <= 0) {
      *error = "Timed out waiting for the peer";
      return false;
    }
    ssize_t n = io(p, bytes);
    if (n == 0 && events == POLLIN) {
      *error = "connection closed";
      return false;
    }
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
        continue;
      }
      *error = std::strerror(errno);
      return false;
    }
    p += n;
    bytes -= static_cast<size_t>(n);
  }
  return true;
}

} // namespace

bool readExact(int fd, void* buf, size_t bytes, Deadline deadline, std::string* error) {
  return transferExact(fd, static_cast<char*>(buf), bytes, POLLIN, deadline, error, [fd](char* p, size_t n) {
    return ::recv(fd, p, n, MSG_DONTWAIT);
  });
}

bool writeExact(int fd, const void* buf, size_t bytes, Deadline deadline, std::string* error) {
  return transferExact(
      fd, const_cast<char*>(static_cast<const char*>(buf)), bytes, POLLOUT, deadline, error,
      [fd](char* p, size_t n) { return ::send(fd, p, n, MSG_DONTWAIT | MSG_NOSIGNAL); });
}

} // namespace monarch
