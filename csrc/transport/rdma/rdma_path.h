#pragma once

// RDMA reads as a payload path: large payloads to a peer on another host go
// through the process's libfabric endpoint (rdma_endpoint.h). At start the
// link sends our endpoint address (kPathAddress); the peer answers kPathReady
// once it can read what we expose. Only then does a sender register a buffer
// and announce it as an RdmaRegion; the receiver fi_reads it into the posted
// tensor. A read that fails while the link works asks for the payload inline.

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>

#include "transport/payload_path.h"
#include "transport/rdma/rdma_endpoint.h"

namespace monarch::rdma {

// What an RDMA read frame carries: a region the sender registered.
struct RdmaRegion {
  uint64_t address; // as the sender's provider wants it named (see registration_cache.h)
  uint64_t bytes;
  uint64_t key;
};

// When a Fabric reads by RDMA. Never to peers on this host.
struct RdmaOptions {
  // kOff never; kAuto where a verbs or efa provider opens (tried at the
  // first peer on another host); kRequired always (the endpoint opens with
  // the Fabric, or RdmaUnavailable is thrown).
  enum class Mode { kOff, kAuto, kRequired };
  Mode mode = Mode::kOff;
  std::string provider; // empty: kDefaultProviders
  size_t minBytes = 0; // smaller payloads go inline on TCP
  // A read without a completion for this long is cancelled (RdmaEndpoint::open).
  std::chrono::milliseconds stallBound{0};
};

class RdmaPath : public PayloadPath {
 public:
  static constexpr uint8_t kFrameFlag = 0x4;
  static constexpr const char* kReadCounter = "rdma_read";
  static constexpr const char* kFallbackCounter = "rdma_fallbacks";

  // A null `endpoint` sends nothing by RDMA and refuses RDMA reads.
  RdmaPath(std::shared_ptr<RdmaEndpoint> endpoint, size_t minBytes);

  const char* name() const override {
    return "rdma";
  }
  uint8_t frameFlag() const override {
    return kFrameFlag;
  }
  bool send(PathLink& link, const FrameHeader& header, const TransferPtr& transfer) override;
  size_t descriptorBytes() const override {
    return sizeof(RdmaRegion);
  }
  uint64_t announcedBytes(const char* descriptor) const override;
  void read(const char* descriptor, const TransferPtr& target, int rank, ReadDone done) override;
  void noteFallback() override {
    ++fallbacks_;
  }
  void start(PathLink& link) override;
  void onControl(PathLink& link, FrameKind kind, const std::string& payload) override;
  void linkFailed(const std::string& reason) override;
  void addCounters(std::map<std::string, uint64_t>& into) const override;

  // Whether large payloads to this peer go by RDMA read.
  bool sends() const {
    return peerReads_.load();
  }

 private:
  const std::shared_ptr<RdmaEndpoint> endpoint_;
  const size_t minBytes_;
  std::atomic<PeerAddress> peer_{kNoPeer}; // set before we say kPathReady
  std::atomic<bool> peerReads_{false}; // the peer said kPathReady
  std::atomic<uint64_t> bytesRead_{0};
  std::atomic<uint64_t> fallbacks_{0}; // reads or registrations that went over TCP
};

// The Fabric's side of the rdma path: one libfabric endpoint, opened when
// the options say, shared by the links to peers on other hosts.
class RdmaPaths {
 public:
  // With Mode::kRequired opens the endpoint now; throws RdmaUnavailable.
  explicit RdmaPaths(RdmaOptions options);

  // The path of a new link to a peer; `sameHost` peers get one that never
  // sends (shared memory and remote reads serve them better).
  std::unique_ptr<RdmaPath> forPeer(bool sameHost);
  // The provider reads go through; empty when none.
  std::string provider();
  // After the links are gone: no read starts from here on.
  void shutdown();

 private:
  const RdmaOptions options_;
  std::mutex mutex_;
  std::shared_ptr<RdmaEndpoint> endpoint_;
  bool tried_ = false; // kAuto opens it once, at the first peer on another host
};

} // namespace monarch::rdma
