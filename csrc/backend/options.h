#pragma once

#include <chrono>
#include <optional>
#include <string>

#include "algorithms/collectives.h"
#include "transport/fabric.h"

namespace monarch {

// Backend settings: torch_monarch.Options as it crosses the binding, resolved
// in Python (MONARCH_* overrides applied, no field but `threads` left None).
// options.py owns every other default. Members keep the Options
// field names in camelCase; forEachField is the one list that pairs them, so
// a new option is a field in options.py, a member and a line here, and the
// code that uses it.
struct BackendOptions {
  std::chrono::milliseconds timeout{};
  std::chrono::milliseconds heartbeatTimeout{};
  // transport, rdma_provider, rdma_min_bytes: read by the transport alone.
  TransportOptions transport;
  std::string bindAddress; // empty: pick one (see defaultBindAddress)
  std::string hostName; // empty: this machine (localHostId)
  // Shared-memory segment of each rank that shares its host with others of
  // its group.
  size_t shmSegmentBytes = 0;
  std::string gpuTransport; // route of CUDA tensors: auto, nccl, host (contract/gpu_route.h)
  // c10d's reconfigure regime (torch >= 2.14; MonarchBackend::createReconfigurable).
  bool enableReconfigure = false;
  std::string job; // whose handles a reconfigurable group takes; empty: its creators
  // Threads of the group's pool (AlgorithmConfig::helpers), the worker
  // included. Unset: the backend picks once it knows how many of the group's
  // ranks share this host (MonarchBackend::attach), the one default not
  // resolved in options.py.
  std::optional<int> threads;
  AlgorithmConfig algorithms;

  // The endpoint these settings ask for.
  FabricOptions fabricOptions() const;

  // Calls visit(name, member) for every torch_monarch.Options field.
  template <typename Visit>
  void forEachField(Visit&& visit) {
    visit("timeout", timeout);
    visit("heartbeat_timeout", heartbeatTimeout);
    visit("transport", transport.name);
    visit("bind_address", bindAddress);
    visit("small_message_bytes", algorithms.smallMessageBytes);
    visit("chunk_bytes", algorithms.chunkBytes);
    visit("direct_max_ranks", algorithms.directMaxRanks);
    visit("threads", threads);
    visit("host_name", hostName);
    visit("shm_min_bytes", algorithms.shmMinBytes);
    visit("cross_memory", algorithms.crossMemory);
    visit("shm_segment_bytes", shmSegmentBytes);
    visit("gpu_transport", gpuTransport);
    visit("rdma_provider", transport.rdmaProvider);
    visit("rdma_min_bytes", transport.rdmaMinBytes);
    visit("enable_reconfigure", enableReconfigure);
    visit("job", job);
  }
};

} // namespace monarch
