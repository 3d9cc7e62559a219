#pragma once

#include <array>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "transport/channel_registry.h"
#include "transport/connection.h"
#include "transport/event_loop.h"
#include "transport/payload_paths.h"
#include "transport/socket.h"
#include "transport/store.h"
#include "transport/wire.h"

namespace monarch {

// Who a group is and who this process is in it, for rendezvous.
struct GroupIdentity {
  uint64_t groupHash = 0;
  uint32_t epoch = 0;
  int rank = 0;
  int size = 1;
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
  ChannelRegistry& channels() {
    return channels_;
  }
  // Live connections (for tests and diagnostics).
  size_t connectionCount();
  PayloadPaths& paths() {
    return paths_;
  }

  // Connects every pair of ranks of a group through `store` and returns the
  // connection to each rank (null for this rank). A live connection to a
  // peer endpoint that both sides still hold is reused; only new pairs
  // connect. Throws std::runtime_error naming the ranks that did not show up
  // before `deadline`.
  std::vector<std::shared_ptr<Connection>> connectGroup(
      KeyValueStore& store, const GroupIdentity& group, Deadline deadline);

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
    std::array<uint8_t, kTokenBytes> token;
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
  std::map<int, std::shared_ptr<Connection>> reusableLinks(KeyValueStore& store, const GroupIdentity& group);
  void acceptLoop();
  void acceptNew(std::vector<PendingHandshake>& pending);
  // Returns true when the handshake finished (accepted or rejected).
  bool progressHandshake(PendingHandshake& handshake);
  void admit(PendingHandshake& handshake);
  std::shared_ptr<Connection> dialPeer(
      KeyValueStore& store, const PendingGroup& pending, int peer, Deadline deadline);
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
  std::vector<std::shared_ptr<Connection>> connections_;
  std::thread acceptor_;
  bool stopped_ = false;
  int leases_ = 0;
};

} // namespace monarch
