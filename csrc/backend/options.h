#pragma once

#include <chrono>
#include <string>

#include "algorithms/collectives.h"
#include "transport/fabric.h"

namespace monarch {

// Backend settings: torch_monarch.Options as it crosses the binding, resolved
// in Python (MONARCH_* overrides applied, no field left None). Members keep
// the Options field names in camelCase; forEachField is the one list that
// pairs them, so a new option is a field in options.py, a member and a line
// here, and the code that uses it.
struct BackendOptions {
  std::chrono::milliseconds timeout{std::chrono::minutes(30)};
  std::chrono::milliseconds heartbeatTimeout{std::chrono::seconds(3)};
  // "auto", "tcp" or "rdma"; see sharesHostMemory() and rdmaMode().
  std::string transport = "auto";
  std::string rdmaProvider; // libfabric provider of the rdma transport; empty: verbs or efa
  size_t rdmaMinBytes = 256 * 1024;
  std::string bindAddress; // empty: pick one (see defaultBindAddress)
  std::string hostName; // empty: this machine (localHostId)
  // Shared-memory segment of each rank that shares its host with others of
  // its group.
  size_t shmSegmentBytes = 8 * 1024 * 1024;
  std::string gpuTransport = "auto"; // route of CUDA tensors: auto, nccl, host (contract/gpu_route.h)
  // c10d's reconfigure regime (torch >= 2.14; MonarchBackend::createReconfigurable).
  bool enableReconfigure = false;
  std::string job; // whose handles a reconfigurable group takes; empty: its creators
  AlgorithmConfig algorithms;

  // Whether ranks on one host move payloads through memory they share (the
  // shared-memory segments and single-copy remote reads); "tcp" turns both off.
  bool sharesHostMemory() const {
    return transport != "tcp";
  }
  // Whether payloads to other hosts go by RDMA read: "rdma" insists, "auto"
  // takes it where a verbs or efa provider opens.
  FabricOptions::Rdma rdmaMode() const {
    return transport == "rdma" ? FabricOptions::Rdma::kRequired
        : transport == "auto"  ? FabricOptions::Rdma::kAuto
                               : FabricOptions::Rdma::kOff;
  }

  // The endpoint these settings ask for.
  FabricOptions fabricOptions() const;

  // Calls visit(name, member) for every torch_monarch.Options field.
  template <typename Visit>
  void forEachField(Visit&& visit) {
    visit("timeout", timeout);
    visit("heartbeat_timeout", heartbeatTimeout);
    visit("transport", transport);
    visit("bind_address", bindAddress);
    visit("small_message_bytes", algorithms.smallMessageBytes);
    visit("chunk_bytes", algorithms.chunkBytes);
    visit("direct_max_ranks", algorithms.directMaxRanks);
    visit("threads", algorithms.threads);
    visit("host_name", hostName);
    visit("shm_min_bytes", algorithms.shmMinBytes);
    visit("shm_segment_bytes", shmSegmentBytes);
    visit("gpu_transport", gpuTransport);
    visit("rdma_provider", rdmaProvider);
    visit("rdma_min_bytes", rdmaMinBytes);
    visit("enable_reconfigure", enableReconfigure);
    visit("job", job);
  }
};

} // namespace monarch
