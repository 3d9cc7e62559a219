#pragma once

#include <array>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "transport/channel_registry.h"
#include "transport/connection.h"
#include "transport/event_loop.h"
#include "transport/payload_paths.h"
#include "transport/rendezvous.h"
#include "transport/socket.h"
#include "transport/wire.h"

namespace monarch {

// Why a group could not form, and which of its ranks were at fault.
struct RendezvousError : std::runtime_error {
  enum class Cause { kTimeout, kPeerGone, kPeerFailed };
  RendezvousError(Cause cause, std::vector<int> ranks, const std::string& message)
      : std::runtime_error(message), cause(cause), ranks(std::move(ranks)) {}
  Cause cause;
  std::vector<int> ranks;
};

// A Fabric's settings, from torch_monarch.Options (which owns the defaults).
struct FabricOptions {
  std::string bindAddress;
  // A peer silent for this long is declared failed. Heartbeats go out at a
  // fifth of it, so several may be lost or late before that happens.
  std::chrono::milliseconds heartbeatTimeout{};
  // Which host this Fabric says it is on (see localHostId()); peers with the
  // same id are on one host. Set apart to make one machine pose as several.
  uint64_t hostId = 0;
  // Options.transport and the payload paths' options (payload_paths.h).
  TransportOptions transport;
};

// The process's endpoint of a job: a listening socket, the TCP connections
// to the peers' Fabrics, the event loop that drives them, the payload paths
// they share and the channels (groups) multiplexed over them. Groups derived
// from one another share a Fabric.
class Fabric {
 public:
  explicit Fabric(FabricOptions options);
  ~Fabric();
  Fabric(const Fabric&) = delete;
  Fabric& operator=(const Fabric&) = delete;

  uint64_t endpointId() const {
    return endpointId_;
  }
  uint64_t hostId() const {
    return options_.hostId;
  }
  // Where this endpoint accepts links.
  const std::string& listenHost() const {
    return address_;
  }
  uint16_t listenPort() const {
    return port_;
  }
  std::string listenAddress() const {
    return address_ + ":" + std::to_string(port_);
  }
  ChannelRegistry& channels() {
    return channels_;
  }
  // Live connections (for tests and diagnostics).
  size_t connectionCount();
  PayloadPaths& paths() {
    return paths_;
  }

  // Connects every pair of ranks of a group, learning who they are through
  // `rendezvous`, and returns the connection to each rank (null for this
  // rank). A live connection to a peer endpoint that both sides still hold is
  // reused; only new pairs connect. Throws RendezvousError naming the ranks
  // that did not show up before `deadline`, or whose process is gone.
  std::vector<std::shared_ptr<Connection>> connectGroup(
      Rendezvous& rendezvous, const GroupIdentity& group, Deadline deadline);

  // Groups sharing the endpoint hold a lease; the last release shuts it down.
  void acquire();
  void release(bool graceful);

  // Stops the threads and closes every socket. A graceful shutdown first
  // tells each peer goodbye, so that it does not take this for a failure.
  void shutdown(bool graceful);

 private:
  // A rendezvous in progress: the peers expected to connect to us.
  struct PendingGroup {
    GroupIdentity group;
    JobToken token;
    bool accepting = false; // `expected` is final: dials may be admitted
    std::set<int> expected; // ranks that will dial us
    std::map<int, std::shared_ptr<Connection>> arrived;
  };
  struct PendingHandshake {
    Socket socket;
    Handshake received;
    size_t have = 0;
    Deadline deadline;
    std::string address;
  };

  // Peers whose live connection both sides agree to reuse, by rank.
  std::map<int, std::shared_ptr<Connection>> reusableLinks(Rendezvous& rendezvous, const GroupIdentity& group);
  // Waits until every expected peer has dialed in; throws RendezvousError
  // at `deadline`, or as soon as one of them is known to be gone.
  void awaitArrivals(Rendezvous& rendezvous, PendingGroup& pending, Deadline deadline);
  void acceptLoop();
  void acceptNew(std::vector<PendingHandshake>& pending);
  // Returns true when the handshake finished (accepted or rejected).
  bool progressHandshake(PendingHandshake& handshake);
  void admit(PendingHandshake& handshake);
  // Closes parked dials whose deadline passed; returns the next deadline.
  Deadline expireParked();
  // Admits the dials that came before their group was accepting.
  void admitParked(PendingGroup& pending);
  std::shared_ptr<Connection> dialPeer(
      Rendezvous& rendezvous, const PendingGroup& pending, int peer, Deadline deadline);
  std::shared_ptr<Connection> adopt(Socket socket, const Handshake& peer, const std::string& address);

  void checkLiveness();

  const uint64_t endpointId_;
  const FabricOptions options_;
  std::string address_;
  uint16_t port_ = 0;
  Socket listener_;
  Socket stopEvent_;
  ChannelRegistry channels_;
  PayloadPaths paths_;
  EventLoop loop_;

  std::mutex mutex_;
  std::condition_variable arrivals_;
  std::vector<PendingGroup*> pendingGroups_;
  // Complete handshakes for a group not (yet) accepting here: a member
  // dialed by its reconfigure handle before this rank began to form the
  // group. Closed when their handshake deadline passes.
  std::vector<PendingHandshake> parked_;
  std::vector<std::shared_ptr<Connection>> connections_;
  std::thread acceptor_;
  bool stopped_ = false;
  int leases_ = 0;
};

} // namespace monarch
