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
// Dials parked for groups not yet forming here, at most: a bound on what
// foreign connections can hold.
constexpr size_t kMaxParked = 1024;

uint64_t randomU64() {
  std::random_device device;
  return (uint64_t(device()) << 32) ^ device();
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
    parked_.clear(); // the acceptor has stopped: nothing admits them now
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
    Rendezvous& rendezvous, const GroupIdentity& group, Deadline deadline) {
  PendingGroup pending;
  pending.group = group;
  pending.token = rendezvous.token();
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

  std::map<int, std::shared_ptr<Connection>> reused = reusableLinks(rendezvous, group);
  {
    std::lock_guard<std::mutex> guard(mutex_);
    for (int peer = group.rank + 1; peer < group.size; ++peer) {
      if (reused.count(peer) == 0) {
        pending.expected.insert(peer);
      }
    }
    pending.accepting = true;
  }
  admitParked(pending);
  // Only now may peers of a store rendezvous dial in: they learn our address here.
  rendezvous.publishAddress(listenAddress());

  std::vector<std::shared_ptr<Connection>> byRank(group.size);
  for (auto& entry : reused) {
    byRank[entry.first] = entry.second;
  }
  for (int peer = 0; peer < group.rank; ++peer) {
    if (!byRank[peer]) {
      byRank[peer] = dialPeer(rendezvous, pending, peer, deadline);
    }
  }
  awaitArrivals(rendezvous, pending, deadline);
  {
    std::lock_guard<std::mutex> guard(mutex_);
    for (auto& entry : pending.arrived) {
      byRank[entry.first] = entry.second;
    }
  }
  for (auto& connection : byRank) {
    if (connection) {
      connection->start();
    }
  }
  return byRank;
}

void Fabric::awaitArrivals(Rendezvous& rendezvous, PendingGroup& pending, Deadline deadline) {
  // A member of a handle rendezvous that never dials in may be gone: look
  // at its address every fifth of the heartbeat timeout, the bound in which
  // a formed group notices a dead peer too.
  const auto probeEvery = options_.heartbeatTimeout / 5;
  const int rank = pending.group.rank;
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    auto wakeAt = rendezvous.addressesListening() ? std::min(deadline, Clock::now() + probeEvery) : deadline;
    bool complete = arrivals_.wait_until(lock, wakeAt, [&] {
      return stopped_ || pending.arrived.size() == pending.expected.size();
    });
    if (complete && !stopped_) {
      return;
    }
    std::vector<int> missing;
    for (int peer : pending.expected) {
      if (pending.arrived.count(peer) == 0) {
        missing.push_back(peer);
      }
    }
    if (stopped_ || Clock::now() >= deadline) {
      throw RendezvousError(
          RendezvousError::Cause::kTimeout, missing,
          "rendezvous: Timed out waiting for ranks " + formatRanks(missing) + " to connect to rank " +
              std::to_string(rank));
    }
    if (!rendezvous.addressesListening()) {
      continue;
    }
    lock.unlock();
    std::vector<int> gone;
    for (int peer : missing) {
      if (rendezvous.gone(peer)) {
        gone.push_back(peer);
      }
    }
    lock.lock();
    if (!gone.empty()) {
      throw RendezvousError(
          RendezvousError::Cause::kPeerGone, gone,
          "rendezvous: ranks " + formatRanks(gone) + " are gone: nothing listens at their handles' addresses any more");
    }
  }
}

size_t Fabric::connectionCount() {
  std::lock_guard<std::mutex> guard(mutex_);
  size_t live = 0;
  for (auto& connection : connections_) {
    live += connection->failed() ? 0 : 1;
  }
  return live;
}

std::map<int, std::shared_ptr<Connection>> Fabric::reusableLinks(Rendezvous& rendezvous, const GroupIdentity& group) {
  rendezvous.publishEndpoint(endpointId_);
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
      uint64_t endpoint = rendezvous.endpointOf(peer);
      for (auto& connection : live) {
        if (connection->peer().endpointId == endpoint) {
          candidates[peer] = connection;
          break;
        }
      }
    }
  }
  std::set<int> ranks;
  for (auto& entry : candidates) {
    ranks.insert(entry.first);
  }
  std::map<int, std::shared_ptr<Connection>> reused;
  for (int peer : rendezvous.agreeOnReuse(ranks)) {
    reused[peer] = candidates.at(peer);
  }
  return reused;
}

std::shared_ptr<Connection> Fabric::dialPeer(
    Rendezvous& rendezvous, const PendingGroup& pending, int peer, Deadline deadline) {
  const GroupIdentity& group = pending.group;
  std::string address = rendezvous.addressOf(peer);
  auto colon = address.rfind(':');
  if (colon == std::string::npos) {
    throw std::runtime_error("malformed address for rank " + std::to_string(peer) + ": " + address);
  }
  const std::string host = address.substr(0, colon);
  const auto port = static_cast<uint16_t>(std::stoi(address.substr(colon + 1)));
  const std::string who = "rank " + std::to_string(peer) + " at " + address;
  // A handle rendezvous dials addresses that were listening before it began.
  const bool listening = rendezvous.addressesListening();
  Handshake mine = makeHandshake(
      pending.token.data(), group.groupHash, group.epoch, group.rank, group.size, endpointId_, options_.hostId);
  auto backoff = std::chrono::milliseconds(1);
  while (true) {
    Socket socket;
    try {
      socket = connectTo(host, port, deadline, /*retryRefused=*/!listening);
    } catch (const ConnectionRefused& e) {
      throw RendezvousError(RendezvousError::Cause::kPeerGone, {peer}, "rendezvous: " + who + " is gone: " + e.what());
    } catch (const std::exception& e) {
      throw RendezvousError(RendezvousError::Cause::kTimeout, {peer}, "rendezvous: " + who + ": " + e.what());
    }
    Handshake theirs;
    std::string error;
    if (writeExact(socket.fd(), &mine, sizeof(mine), deadline, &error) &&
        readExact(socket.fd(), &theirs, sizeof(theirs), deadline, &error)) {
      Status valid = validateHandshake(theirs, pending.token.data(), group.groupHash, group.epoch, group.size);
      if (valid.ok() && theirs.rank != peer) {
        valid = Status::error(ErrorKind::kProtocol, {}, "expected rank " + std::to_string(peer) + ", got rank " + std::to_string(theirs.rank));
      }
      if (!valid.ok()) {
        throw RendezvousError(RendezvousError::Cause::kPeerFailed, {peer}, who + ": " + valid.message);
      }
      return adopt(std::move(socket), theirs, address);
    }
    bool late = Clock::now() >= deadline;
    if (!listening || late) {
      throw RendezvousError(
          late ? RendezvousError::Cause::kTimeout : RendezvousError::Cause::kPeerFailed, {peer},
          "handshake with " + who + " failed: " + error);
    }
    // The peer closed the dial unanswered: it waited longer for this group
    // to form there than a handshake may. Dial again until the deadline.
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(100));
  }
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
    Deadline nextDeadline = expireParked();
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

Deadline Fabric::expireParked() {
  auto now = Clock::now();
  Deadline next = now + kHandshakeTimeout;
  std::vector<PendingHandshake> expired;
  {
    std::lock_guard<std::mutex> guard(mutex_);
    std::vector<PendingHandshake> still;
    for (auto& handshake : parked_) {
      if (now < handshake.deadline) {
        next = std::min(next, handshake.deadline);
        still.push_back(std::move(handshake));
      } else {
        expired.push_back(std::move(handshake));
      }
    }
    parked_.swap(still);
  }
  for (auto& handshake : expired) {
    MONARCH_LOG(kWarn) << "closing connection from " << handshake.address << " (rank " << handshake.received.rank
                       << "): its group did not begin to form here within " << kHandshakeTimeout.count() << " s";
  }
  return next;
}

void Fabric::admit(PendingHandshake& handshake) {
  const Handshake& hs = handshake.received;
  std::unique_lock<std::mutex> lock(mutex_);
  if (hs.magic == kMagic && hs.rank == kProbeRank) {
    return; // a liveness probe: it has its answer
  }
  PendingGroup* group = nullptr;
  Status verdict = Status::error(ErrorKind::kProtocol, {}, "handshake rejected: no group is forming for it");
  if (hs.magic != kMagic) {
    verdict = validateHandshake(hs, nullptr, 0, 0, 0);
  }
  for (PendingGroup* candidate : pendingGroups_) {
    if (candidate->group.groupHash == hs.groupHash && candidate->group.epoch == hs.epoch) {
      group = candidate;
      break;
    }
  }
  if (hs.magic == kMagic && hs.epoch == kHandleEpoch && parked_.size() < kMaxParked &&
      (group == nullptr || !group->accepting)) {
    // Dialed by handle before this end began to form the group: it waits.
    handshake.deadline = Clock::now() + kHandshakeTimeout;
    parked_.push_back(std::move(handshake));
    return;
  }
  if (group != nullptr) {
    verdict = validateHandshake(hs, group->token.data(), hs.groupHash, hs.epoch, group->group.size);
    if (verdict.ok() && (group->expected.count(hs.rank) == 0 || group->arrived.count(hs.rank) != 0)) {
      verdict = Status::error(ErrorKind::kProtocol, {}, "handshake rejected: unexpected or duplicate rank " + std::to_string(hs.rank));
    }
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

void Fabric::admitParked(PendingGroup& pending) {
  std::vector<PendingHandshake> mine;
  {
    std::lock_guard<std::mutex> guard(mutex_);
    std::vector<PendingHandshake> others;
    for (auto& handshake : parked_) {
      bool match = handshake.received.groupHash == pending.group.groupHash && handshake.received.epoch == pending.group.epoch;
      (match ? mine : others).push_back(std::move(handshake));
    }
    parked_.swap(others);
  }
  for (auto& handshake : mine) {
    admit(handshake);
  }
}

} // namespace monarch
