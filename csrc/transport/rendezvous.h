#pragma once

#include <array>
#include <cstdint>
#include <set>
#include <string>

#include "transport/socket.h"
#include "transport/wire.h"

namespace monarch {

// Who a group is and who this process is in it, for rendezvous.
struct GroupIdentity {
  uint64_t groupHash = 0;
  uint32_t epoch = 0;
  int rank = 0;
  int size = 1;
};

using JobToken = std::array<uint8_t, kTokenBytes>;

// What Fabric::connectGroup learns from a group's rendezvous: the token its
// links present, where each rank listens, which process each rank is, and
// which live links both ends reuse. A store-backed rendezvous
// (store_rendezvous.h) learns it through torch's c10d::Store; a handle
// directory (handle_rendezvous.h) reads it from the reconfigure handles.
class Rendezvous {
 public:
  virtual ~Rendezvous() = default;

  // The token every link of the group presents in its handshake.
  virtual JobToken token() = 0;
  // This rank's endpoint, before any other call about peers.
  virtual void publishEndpoint(uint64_t endpointId) = 0;
  // The endpoint id of `rank`'s process.
  virtual uint64_t endpointOf(int rank) = 0;
  // Of `candidates`, the ranks this one holds a live link to, those that
  // both ends reuse (a link is reused only when both sides say so).
  virtual std::set<int> agreeOnReuse(const std::set<int>& candidates) = 0;
  // Says where this rank listens: peers may dial it from now on.
  virtual void publishAddress(const std::string& hostPort) = 0;
  // host:port where `rank` listens.
  virtual std::string addressOf(int rank) = 0;
  // Whether every address was listening before the rendezvous began, so that
  // a refused dial means the peer's process is gone rather than not up yet.
  virtual bool addressesListening() const = 0;
  // Whether `rank`'s process is known to be gone (asked while waiting for it
  // to dial in); false when that cannot be told.
  virtual bool gone(int /*rank*/) {
    return false;
  }
};

} // namespace monarch
