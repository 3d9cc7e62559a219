#pragma once

// The registration of every payload path (payload_path.h): which paths a
// link gets, in the order a sender tries them, and what Options.transport
// means to them. A new path is a folder under transport/ and an entry here
// (its options, its counters, its line in PayloadPaths::forPeer).

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "transport/payload_path.h"
#include "transport/rdma/rdma_path.h"

namespace monarch {

// Options.transport and the options of the paths, as torch_monarch.Options
// holds them (options.py documents each and owns their defaults). The only
// place that reads the transport word.
struct TransportOptions {
  std::string name; // "auto", "tcp" or "rdma"
  std::string rdmaProvider; // empty: rdma::kDefaultProviders
  size_t rdmaMinBytes = 0;

  // Whether ranks on one host move payloads through memory they share: the
  // shared-memory segments (shm/) and remote reads. "tcp" turns both off.
  bool sharesHostMemory() const;
  // Whether payloads to other hosts go by RDMA read: "rdma" insists, "auto"
  // takes it where a verbs or efa provider opens.
  rdma::RdmaOptions::Mode rdmaMode() const;
};

// A Fabric's payload paths: what the paths share across links (the RDMA
// endpoint), and each new link's own set.
class PayloadPaths {
 public:
  // `hostId` is the Fabric's; reads that stall for `heartbeatTimeout` fail.
  // Throws rdma::RdmaUnavailable when transport "rdma" cannot be had.
  PayloadPaths(const TransportOptions& options, uint64_t hostId, std::chrono::milliseconds heartbeatTimeout);

  // The paths of a new link to `peer`: remote read, RDMA read, inline TCP.
  PayloadPathList forPeer(const PeerIdentity& peer);
  // Every path's counters at zero (the keys of transport_bytes()).
  static std::map<std::string, uint64_t> zeroCounters();
  // The libfabric provider large cross-host payloads go through; empty when none.
  std::string rdmaProvider();
  // Once the links are gone.
  void shutdown();

 private:
  const bool sharesHostMemory_;
  const uint64_t hostId_;
  rdma::RdmaPaths rdma_;
};

} // namespace monarch
