#include "transport/fabric.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <random>
#include <sstream>
#include <stdexcept>

#include "common/logging.h"

namespace monarch {

namespace {

// How long an accepted socket may take to send its handshake. Real peers send
// it at once; this bounds what a silent foreign connection can hold.
constexpr auto kHandshakeTimeout = std::chrono::seconds(10);
// How long a graceful shutdown may spend flushing a link to a slow peer.
constexpr auto kGoodbyeTimeout = std::chrono::seconds(1);

uint64_t randomU64() {
  std::random_device device;
  return (uint64_t(device()) << 32) ^ device();
}

std::string toHex(const uint8_t* bytes, size_t n) {
  static const char* kDigits = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < n; ++i) {
    out.push_back(kDigits[bytes[i] >> 4]);
    out.push_back(kDigits[bytes[i] & 0xf]);
  }
  return out;
}

bool fromHex(const std::string& text, uint8_t* bytes, size_t n) {
  if (text.size() != 2 * n) {
    return false;
  }
  for (size_t i = 0; i < n; ++i) {
    unsigned value = 0;
    if (std::sscanf(text.c_str() + 2 * i, "%2x", &value) != 1) {
      return false;
    }
    bytes[i] = static_cast<uint8_t>(value);
  }
  return true;
}

std::string peerAddress(int fd) {
  sockaddr_in addr{};
  socklen_t len = sizeof(addr);
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    return "unknown";
  }
  char text[INET_ADDRSTRLEN];
  ::inet_ntop(AF_INET, &addr.sin_addr, text, sizeof(text));
  return std::string(text) + ":" + std::to_string(ntohs(addr.sin_port));
}

std::string storeKey(const GroupIdentity& group, const std::string& what) {
  return "monarch/" + std::to_string(group.epoch) + "/" + what;
}

} // namespace

Fabric::Fabric(FabricOptions options)
    : endpointId_(randomU64()),
      options_(std::move(options)),
      address_(options_.bindAddress),
      stopEvent_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)),
      paths_(options_.transport, options_.hostId, options_.heartbeatTimeout) {
  if (options_.heartbeatTimeout.count() <= 0) {
    throw std::invalid_argument("FabricOptions.heartbeatTimeout must be positive");
  }
  listener_ = listenOn(address_, &port_);
  setNonBlocking(listener_.fd(), true);
  acceptor_ = std::thread([this] { acceptLoop(); });
  loop_.setTicker(options_.heartbeatTimeout / 5, [this] { checkLiveness(); });
}

void Fabric::checkLiveness() {
  std::vector<std::shared_ptr<Connection>> connections;
  {
    std::lock_guard<std::mutex> guard(mutex_);
    connections = connections_;
  }
  auto now = Clock::now();
  for (auto& connection : connections) {
    connection->checkLiveness(now, options_.heartbeatTimeout / 5, options_.heartbeatTimeout);
  }
}

Fabric::~Fabric() {
  shutdown(false);
}

void Fabric::acquire() {
  std::lock_guard<std::mutex> guard(mutex_);
  ++leases_;
}

void Fabric::release(bool graceful) {
  {
    std::lock_guard<std::mutex> guard(mutex_);
    if (--leases_ > 0) {
      return;
    }
  }
  shutdown(graceful);
}

void Fabric::shutdown(bool graceful) {
  {
    std::lock_guard<std::mutex> guard(mutex_);
    if (stopped_) {
      return;
    }
    stopped_ = true;
  }
  uint64_t one = 1;
  (void)!::write(stopEvent_.fd(), &one, sizeof(one));
  if (acceptor_.joinable()) {
    acceptor_.join();
  }
  std::vector<std::shared_ptr<Connection>> connections;
  {
    std::lock_guard<std::mutex> guard(mutex_);
    connections.swap(connections_);
  }
  for (auto& connection : connections) {
    if (graceful) {
      connection->closeGracefully(Clock::now() + kGoodbyeTimeout);
    }
    connection->fail("endpoint shut down");
  }
  loop_.stop();
  paths_.shutdown(); // after the links: no read starts from here on
  arrivals_.notify_all();
}

std::vector<std::shared_ptr<Connection>> Fabric::connectGroup(
    KeyValueStore& store, const GroupIdentity& group, Deadline deadline) {
  PendingGroup pending;
  pending.group = group;
  if (group.rank == 0) {
    for (auto& byte : pending.token) {
      byte = static_cast<uint8_t>(randomU64());
    }
    store.set(storeKey(group, "token"), toHex(pending.token.data(), kTokenBytes));
  } else if (!fromHex(store.get(storeKey(group, "token")), pending.token.data(), kTokenBytes)) {
    throw std::runtime_error("malformed job token in the rendezvous store");
  }
  {
    std::lock_guard<std::mutex> guard(mutex_);
    pendingGroups_.push_back(&pending);
  }
  struct Unregister {
    Fabric* fabric;
    PendingGroup* pending;
    ~Unregister() {
      std::lock_guard<std::mutex> guard(fabric->mutex_);
      auto& groups = fabric->pendingGroups_;
      groups.erase(std::remove(groups.begin(), groups.end(), pending), groups.end());
    }
  } unregister{this, &pending};

  std::map<int, std::shared_ptr<Connection>> reused = reusableLinks(store, group);
  {
    std::lock_guard<std::mutex> guard(mutex_);
    for (int peer = group.rank + 1; peer < group.size; ++peer) {
      if (reused.count(peer) == 0) {
        pending.expected.insert(peer);
      }
    }
  }
  // Only now may peers dial in: they learn our address from this key.
  store.set(storeKey(group, "addr/" + std::to_string(group.rank)), address_ + ":" + std::to_string(port_));

  std::vector<std::shared_ptr<Connection>> byRank(group.size);
  for (auto& entry : reused) {
    byRank[entry.first] = entry.second;
  }
  for (int peer = 0; peer < group.rank; ++peer) {
    if (!byRank[peer]) {
      byRank[peer] = dialPeer(store, pending, peer, deadline);
    }
  }
  std::unique_lock<std::mutex> lock(mutex_);
  bool complete = arrivals_.wait_until(lock, deadline, [&] {
    return stopped_ || pending.arrived.size() == pending.expected.size();
  });
  if (!complete || stopped_) {
    std::vector<int> missing;
    for (int peer : pending.expected) {
      if (pending.arrived.count(peer) == 0) {
        missing.push_back(peer);
      }
    }
    throw std::runtime_error(
        "rendezvous: Timed out waiting for ranks " + formatRanks(missing) + " to connect to rank " +
        std::to_string(group.rank));
  }
  for (auto& entry : pending.arrived) {
    byRank[entry.first] = entry.second;
  }
  lock.unlock();
  for (auto& connection : byRank) {
    if (connection) {
      connection->start();
    }
  }
  return byRank;
}

size_t Fabric::connectionCount() {
  std::lock_guard<std::mutex> guard(mutex_);
  size_t live = 0;
  for (auto& connection : connections_) {
    live += connection->failed() ? 0 : 1;
  }
  return live;
}

std::map<int, std::shared_ptr<Connection>> Fabric::reusableLinks(KeyValueStore& store, const GroupIdentity& group) {
  // Each rank publishes its endpoint id, then which peers it still holds a
  // live connection to; a link is reused only when both ends list each other,
  // so that no rank waits for a dial its peer will not make.
  store.set(storeKey(group, "endpoint/" + std::to_string(group.rank)), std::to_string(endpointId_));
  std::map<int, std::shared_ptr<Connection>> candidates;
  std::vector<std::shared_ptr<Connection>> live;
  {
    std::lock_guard<std::mutex> guard(mutex_);
    for (auto& connection : connections_) {
      if (!connection->failed()) {
        live.push_back(connection);
      }
    }
  }
  if (!live.empty()) {
    for (int peer = 0; peer < group.size; ++peer) {
      if (peer == group.rank) {
        continue;
      }
      uint64_t endpoint = std::stoull(store.get(storeKey(group, "endpoint/" + std::to_string(peer))));
      for (auto& connection : live) {
        if (connection->peer().endpointId == endpoint) {
          candidates[peer] = connection;
          break;
        }
      }
    }
  }
  std::string reachable;
  for (auto& entry : candidates) {
    reachable += std::to_string(entry.first) + ",";
  }
  store.set(storeKey(group, "reach/" + std::to_string(group.rank)), reachable);
  std::map<int, std::shared_ptr<Connection>> reused;
  const std::string me = std::to_string(group.rank);
  for (auto& entry : candidates) {
    std::string theirs = "," + store.get(storeKey(group, "reach/" + std::to_string(entry.first)));
    if (theirs.find("," + me + ",") != std::string::npos) {
      reused.insert(entry);
    }
  }
  return reused;
}

std::shared_ptr<Connection> Fabric::dialPeer(
    KeyValueStore& store, const PendingGroup& pending, int peer, Deadline deadline) {
  const GroupIdentity& group = pending.group;
  std::string address = store.get(storeKey(group, "addr/" + std::to_string(peer)));
  auto colon = address.rfind(':');
  if (colon == std::string::npos) {
    throw std::runtime_error("malformed address for rank " + std::to_string(peer) + ": " + address);
  }
  Socket socket = connectTo(address.substr(0, colon), static_cast<uint16_t>(std::stoi(address.substr(colon + 1))), deadline);
  Handshake mine = makeHandshake(
      pending.token.data(), group.groupHash, group.epoch, group.rank, group.size, endpointId_, options_.hostId);
  Handshake theirs;
  std::string error;
  if (!writeExact(socket.fd(), &mine, sizeof(mine), deadline, &error) ||
      !readExact(socket.fd(), &theirs, sizeof(theirs), deadline, &error)) {
    throw std::runtime_error("handshake with rank " + std::to_string(peer) + " at " + address + " failed: " + error);
  }
  Status valid = validateHandshake(theirs, pending.token.data(), group.groupHash, group.epoch, group.size);
  if (valid.ok() && theirs.rank != peer) {
    valid = Status::error(ErrorKind::kProtocol, {}, "expected rank " + std::to_string(peer) + ", got rank " + std::to_string(theirs.rank));
  }
  if (!valid.ok()) {
    throw std::runtime_error("rank " + std::to_string(peer) + " at " + address + ": " + valid.message);
  }
  return adopt(std::move(socket), theirs, address);
}

std::shared_ptr<Connection> Fabric::adopt(Socket socket, const Handshake& peer, const std::string& address) {
  PeerIdentity identity{peer.endpointId, peer.pid, address, peer.hostId, peer.probeAddress};
  PayloadPathList paths = paths_.forPeer(identity);
  std::lock_guard<std::mutex> guard(mutex_);
  auto connection = std::make_shared<Connection>(std::move(socket), identity, &channels_, &loop_, std::move(paths));
  connections_.push_back(connection);
  return connection;
}

void Fabric::acceptLoop() {
  std::vector<PendingHandshake> pending;
  while (true) {
    std::vector<pollfd> fds;
    fds.push_back({stopEvent_.fd(), POLLIN, 0});
    fds.push_back({listener_.fd(), POLLIN, 0});
    Deadline nextDeadline = Clock::now() + kHandshakeTimeout;
    for (auto& handshake : pending) {
      fds.push_back({handshake.socket.fd(), POLLIN, 0});
      nextDeadline = std::min(nextDeadline, handshake.deadline);
    }
    auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(nextDeadline - Clock::now());
    int rc = ::poll(fds.data(), fds.size(), std::max<int>(0, static_cast<int>(wait.count())) + 1);
    if (rc < 0 && errno != EINTR) {
      MONARCH_LOG(kError) << "accept loop poll failed: " << std::strerror(errno);
      return;
    }
    if (fds[0].revents != 0) {
      return;
    }
    // Progress handshakes first: accepting appends to `pending`.
    std::vector<PendingHandshake> still;
    for (size_t i = 0; i < pending.size(); ++i) {
      bool ready = fds[i + 2].revents != 0;
      if (ready ? !progressHandshake(pending[i]) : Clock::now() < pending[i].deadline) {
        still.push_back(std::move(pending[i]));
      } else if (!ready) {
        MONARCH_LOG(kWarn) << "closing connection from " << pending[i].address
                           << ": no handshake within " << kHandshakeTimeout.count() << " s";
      }
    }
    pending.swap(still);
    if (fds[1].revents != 0) {
      acceptNew(pending);
    }
  }
}

void Fabric::acceptNew(std::vector<PendingHandshake>& pending) {
  while (true) {
    int fd = ::accept4(listener_.fd(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      return;
    }
    PendingHandshake handshake;
    handshake.socket = Socket(fd);
    handshake.deadline = Clock::now() + kHandshakeTimeout;
    handshake.address = peerAddress(fd);
    pending.push_back(std::move(handshake));
  }
}

bool Fabric::progressHandshake(PendingHandshake& handshake) {
  auto* dest = reinterpret_cast<char*>(&handshake.received) + handshake.have;
  ssize_t n = ::recv(handshake.socket.fd(), dest, sizeof(Handshake) - handshake.have, MSG_DONTWAIT);
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
    return false;
  }
  if (n <= 0) {
    MONARCH_LOG(kWarn) << "connection from " << handshake.address << " closed before its handshake";
    return true;
  }
  handshake.have += static_cast<size_t>(n);
  if (handshake.have < sizeof(Handshake)) {
    return false;
  }
  admit(handshake);
  return true;
}

void Fabric::admit(PendingHandshake& handshake) {
  const Handshake& hs = handshake.received;
  std::unique_lock<std::mutex> lock(mutex_);
  PendingGroup* group = nullptr;
  Status verdict = Status::error(ErrorKind::kProtocol, {}, "handshake rejected: no group is forming for it");
  if (hs.magic != kMagic) {
    verdict = validateHandshake(hs, nullptr, 0, 0, 0);
  }
  for (PendingGroup* candidate : pendingGroups_) {
    if (candidate->group.groupHash != hs.groupHash || candidate->group.epoch != hs.epoch) {
      continue;
    }
    verdict = validateHandshake(hs, candidate->token.data(), hs.groupHash, hs.epoch, candidate->group.size);
    if (verdict.ok() && (candidate->expected.count(hs.rank) == 0 || candidate->arrived.count(hs.rank) != 0)) {
      verdict = Status::error(ErrorKind::kProtocol, {}, "handshake rejected: unexpected or duplicate rank " + std::to_string(hs.rank));
    }
    group = candidate;
    break;
  }
  if (!verdict.ok()) {
    lock.unlock();
    MONARCH_LOG(kWarn) << "closing connection from " << handshake.address << ": " << verdict.message;
    return;
  }
  Handshake reply = makeHandshake(
      group->token.data(), group->group.groupHash, group->group.epoch, group->group.rank, group->group.size, endpointId_,
      options_.hostId);
  lock.unlock();
  std::string error;
  setNonBlocking(handshake.socket.fd(), false);
  setNoDelay(handshake.socket.fd());
  if (!writeExact(handshake.socket.fd(), &reply, sizeof(reply), Clock::now() + kHandshakeTimeout, &error)) {
    MONARCH_LOG(kWarn) << "handshake reply to " << handshake.address << " failed: " << error;
    return;
  }
  auto connection = adopt(std::move(handshake.socket), hs, handshake.address);
  lock.lock();
  // The group may have given up while we replied.
  if (std::find(pendingGroups_.begin(), pendingGroups_.end(), group) != pendingGroups_.end()) {
    group->arrived[hs.rank] = connection;
  }
  lock.unlock();
  arrivals_.notify_all();
}

} // namespace monarch
