#include "transport/rdma/rdma_path.h"

#include <dirent.h>

#include "common/logging.h"

namespace monarch::rdma {

namespace {

// Whether this machine has an RDMA device: verbs and efa devices both show
// up here. Without one, "auto" does not load libfabric at all.
bool rdmaDevicePresent() {
  DIR* dir = ::opendir("/sys/class/infiniband");
  if (dir == nullptr) {
    return false;
  }
  bool found = false;
  while (dirent* entry = ::readdir(dir)) {
    if (entry->d_name[0] != '.') {
      found = true;
      break;
    }
  }
  ::closedir(dir);
  return found;
}

} // namespace

RdmaPath::RdmaPath(std::shared_ptr<RdmaEndpoint> endpoint, size_t minBytes)
    : endpoint_(std::move(endpoint)), minBytes_(std::max<size_t>(minBytes, 1)) {} // an empty payload has nothing to read

bool RdmaPath::send(PathLink& link, const FrameHeader& header, const TransferPtr& transfer) {
  if (!peerReads_ || transfer->bytes < minBytes_) {
    return false;
  }
  Registration registration;
  std::string error;
  std::shared_ptr<void> owner = transfer->keepalive ? transfer->keepalive : std::shared_ptr<void>(transfer);
  if (!endpoint_->expose(transfer->data, transfer->bytes, owner, &registration, &error)) {
    // Nothing announced yet: sending it inline is safe.
    MONARCH_LOG(kWarn) << "rdma: " << error << "; sending to " << link.peer().address << " over TCP";
    ++fallbacks_;
    return false;
  }
  announce(link, header, RdmaRegion{registration.remoteAddress, transfer->bytes, registration.key}, transfer);
  return true;
}

uint64_t RdmaPath::announcedBytes(const char* descriptor) const {
  return regionOf<RdmaRegion>(descriptor).bytes;
}

void RdmaPath::read(const char* descriptor, const TransferPtr& target, int rank, ReadDone done) {
  const auto region = regionOf<RdmaRegion>(descriptor);
  if (!endpoint_ || peer_.load() == kNoPeer) {
    done(Status::error(
             ErrorKind::kProtocol, {rank},
             "rank " + std::to_string(rank) + " announced an rdma read before this link exchanged rdma addresses"),
         false);
    return;
  }
  std::shared_ptr<void> owner = target->keepalive ? target->keepalive : std::shared_ptr<void>(target);
  endpoint_->read(
      peer_.load(), target->data, region.bytes, region.address, region.key, std::move(owner), this,
      [this, rank, bytes = region.bytes, done = std::move(done)](const std::string& error) {
        if (error.empty()) {
          bytesRead_ += bytes;
          done({}, false);
          return;
        }
        done(Status::error(ErrorKind::kPeerFailure, {rank}, "rdma read from rank " + std::to_string(rank) + " failed: " + error),
             /*resendInline=*/true);
      });
}

void RdmaPath::start(PathLink& link) {
  if (endpoint_) {
    // The peer answers kPathReady once it can read what we expose.
    const std::string& address = endpoint_->address();
    link.sendControl(makePathControlHeader(FrameKind::kPathAddress, kFrameFlag, address.size()), address);
  }
}

void RdmaPath::onControl(PathLink& link, FrameKind kind, const std::string& payload) {
  if (kind == FrameKind::kPathReady) {
    peerReads_ = endpoint_ != nullptr;
    return;
  }
  if (!endpoint_) {
    return; // a peer on this host, or no RDMA here: payloads stay on TCP
  }
  PeerAddress peer = kNoPeer;
  std::string error;
  if (!endpoint_->addPeer(payload, &peer, &error)) {
    MONARCH_LOG(kWarn) << "rdma address of " << link.peer().address << " (pid " << link.peer().pid
                       << ") rejected: " << error << "; its payloads to this process go over TCP";
    return;
  }
  peer_ = peer;
  link.sendControl(makePathControlHeader(FrameKind::kPathReady, kFrameFlag, 0), {});
}

void RdmaPath::linkFailed(const std::string& reason) {
  if (endpoint_) {
    // Completes this link's reads in flight (their `done` sees the link failed).
    endpoint_->cancelReads(this, "link failed: " + reason);
  }
}

void RdmaPath::addCounters(std::map<std::string, uint64_t>& into) const {
  into[kReadCounter] += bytesRead_.load();
  into[kFallbackCounter] += fallbacks_.load();
}

RdmaPaths::RdmaPaths(RdmaOptions options) : options_(std::move(options)) {
  if (options_.mode == RdmaOptions::Mode::kRequired) {
    endpoint_ = RdmaEndpoint::open(options_.provider, options_.stallBound);
    tried_ = true;
  }
}

std::unique_ptr<RdmaPath> RdmaPaths::forPeer(bool sameHost) {
  if (options_.mode == RdmaOptions::Mode::kOff || sameHost) {
    return std::make_unique<RdmaPath>(nullptr, options_.minBytes);
  }
  std::lock_guard<std::mutex> guard(mutex_);
  if (!tried_) {
    tried_ = true;
    if (options_.mode == RdmaOptions::Mode::kAuto && options_.provider.empty() && !rdmaDevicePresent()) {
      return std::make_unique<RdmaPath>(nullptr, options_.minBytes);
    }
    try {
      endpoint_ = RdmaEndpoint::open(options_.provider, options_.stallBound);
    } catch (const RdmaUnavailable& e) {
      MONARCH_LOG(kDebug) << "no rdma between hosts, payloads go over TCP: " << e.what();
    }
  }
  return std::make_unique<RdmaPath>(endpoint_, options_.minBytes);
}

std::string RdmaPaths::provider() {
  std::lock_guard<std::mutex> guard(mutex_);
  return endpoint_ ? endpoint_->provider() : std::string();
}

void RdmaPaths::shutdown() {
  std::shared_ptr<RdmaEndpoint> endpoint;
  {
    std::lock_guard<std::mutex> guard(mutex_);
    endpoint = std::move(endpoint_);
    tried_ = true; // a link adopted from here on gets none
  }
  if (endpoint) {
    endpoint->shutdown();
  }
}

} // namespace monarch::rdma
