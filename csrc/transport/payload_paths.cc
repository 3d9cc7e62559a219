#include "transport/payload_paths.h"

#include "common/logging.h"
#include "transport/remote_read/cross_memory.h"
#include "transport/remote_read/remote_read_path.h"
#include "transport/tcp/inline_path.h"

namespace monarch {

bool TransportOptions::sharesHostMemory() const {
  return name != "tcp";
}

rdma::RdmaOptions::Mode TransportOptions::rdmaMode() const {
  using Mode = rdma::RdmaOptions::Mode;
  return name == "rdma" ? Mode::kRequired : name == "auto" ? Mode::kAuto : Mode::kOff;
}

PayloadPaths::PayloadPaths(const TransportOptions& options, uint64_t hostId, std::chrono::milliseconds heartbeatTimeout)
    : sharesHostMemory_(options.sharesHostMemory()),
      hostId_(hostId),
      rdma_(rdma::RdmaOptions{options.rdmaMode(), options.rdmaProvider, options.rdmaMinBytes, heartbeatTimeout}) {}

PayloadPathList PayloadPaths::forPeer(const PeerIdentity& peer) {
  const bool sameHost = peer.hostId == hostId_;
  const bool readable =
      sharesHostMemory_ && sameHost && canReadFrom(static_cast<pid_t>(peer.pid), peer.probeAddress);
  MONARCH_LOG(kDebug) << "link to " << peer.address << " (pid " << peer.pid << ") "
                      << (readable ? "uses same-host remote reads" : "uses TCP for payloads");
  PayloadPathList paths;
  paths.push_back(std::make_unique<RemoteReadPath>(peer.pid, readable));
  paths.push_back(rdma_.forPeer(sameHost));
  paths.push_back(std::make_unique<InlinePath>()); // last: it takes every payload
  return paths;
}

std::map<std::string, uint64_t> PayloadPaths::zeroCounters() {
  return {
      {InlinePath::kSentCounter, 0},
      {RemoteReadPath::kReadCounter, 0},
      {rdma::RdmaPath::kReadCounter, 0},
      {rdma::RdmaPath::kFallbackCounter, 0}};
}

std::string PayloadPaths::rdmaProvider() {
  return rdma_.provider();
}

void PayloadPaths::shutdown() {
  rdma_.shutdown();
}

} // namespace monarch
