#pragma once

// The seam between a link (Connection: framing and liveness) and the ways a
// data frame's payload reaches the peer, as Gloo keeps its transports side by
// side. Inline TCP (tcp/) writes the bytes after the frame header. A read path
// (remote_read/, rdma/) writes a descriptor of the sender's buffer there
// instead, under its own bit of kFramePathMask; the receiver reads the bytes
// the descriptor names straight into the posted receive and answers
// kReadDone, and only then does the send complete. payload_paths.h registers
// the paths and gives every link its own instance of each.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "transport/transfer.h"
#include "transport/wire.h"

namespace monarch {

// Identity of the peer process's Fabric, from its handshake.
struct PeerIdentity {
  uint64_t endpointId = 0;
  uint32_t pid = 0;
  std::string address;
  uint64_t hostId = 0;
  uint64_t probeAddress = 0; // see probeWordAddress()
};

// What a payload path may ask of the link it serves.
class PathLink {
 public:
  virtual const PeerIdentity& peer() const = 0;
  // Queues data frame `header` with `transfer`'s bytes after it; the send
  // completes once they are written.
  virtual void sendInline(const FrameHeader& header, const TransferPtr& transfer) = 0;
  // Queues data frame `header` (its path bit set) carrying `descriptor`; the
  // send completes at the peer's kReadDone, or goes inline if it asks so.
  virtual void sendDescriptor(const FrameHeader& header, std::string descriptor, const TransferPtr& transfer) = 0;
  // Queues a control frame (a path's kPathAddress or kPathReady).
  virtual void sendControl(const FrameHeader& header, std::string payload) = 0;

 protected:
  ~PathLink() = default;
};

class PayloadPath {
 public:
  virtual ~PayloadPath() = default;

  // For logs and error messages ("remote", "rdma").
  virtual const char* name() const = 0;
  // The kFramePathMask bit of this path's data frames; 0 for inline TCP,
  // whose frames carry the payload itself.
  virtual uint8_t frameFlag() const = 0;

  // Sender. Sends `transfer` (data frame `header`) through `link` by this
  // path and returns true, or returns false having sent nothing, and the
  // next path of the link takes it.
  virtual bool send(PathLink& link, const FrameHeader& header, const TransferPtr& transfer) = 0;

  // Receiver, read paths only. The length of this path's descriptors; a
  // frame announcing another length is corrupt. At most kMaxPathDescriptor.
  virtual size_t descriptorBytes() const {
    return 0;
  }
  // The payload bytes `descriptor` names.
  virtual uint64_t announcedBytes(const char* /*descriptor*/) const {
    return 0;
  }
  // How a read ended: ok, or why not; with `resendInline` the peer should
  // send the payload inline instead, if the link still works.
  using ReadDone = std::function<void(Status status, bool resendInline)>;
  // Reads the bytes `descriptor` names into `target` (checked against the
  // frame already) from group rank `rank`. `done` runs once, on any thread,
  // after the bytes are counted.
  virtual void read(const char* /*descriptor*/, const TransferPtr& /*target*/, int rank, ReadDone done) {
    done(Status::error(ErrorKind::kProtocol, {rank}, std::string("the ") + name() + " path reads nothing"), false);
  }
  // A read of this path was handed back to TCP (counted, for diagnostics).
  virtual void noteFallback() {}

  // The link is about to carry frames (a path may introduce itself).
  virtual void start(PathLink& /*link*/) {}
  // A control frame of this path (kPathAddress, kPathReady) from the peer.
  virtual void onControl(PathLink& /*link*/, FrameKind /*kind*/, const std::string& /*payload*/) {}
  // The link broke: reads in flight end now, with `reason`.
  virtual void linkFailed(const std::string& /*reason*/) {}

  // Adds this path's counters (bytes moved, fallbacks) to `into`.
  virtual void addCounters(std::map<std::string, uint64_t>& into) const = 0;

 protected:
  // Sends `region` (a read path's descriptor struct, in host byte order as
  // all of wire.h) for the peer to read `transfer` by.
  template <typename Region>
  void announce(PathLink& link, const FrameHeader& header, const Region& region, const TransferPtr& transfer) const {
    FrameHeader described = header;
    described.flags |= frameFlag();
    link.sendDescriptor(described, std::string(reinterpret_cast<const char*>(&region), sizeof(region)), transfer);
  }
  template <typename Region>
  static Region regionOf(const char* descriptor) {
    Region region;
    std::memcpy(&region, descriptor, sizeof(region));
    return region;
  }
};

// A link's paths, in the order a sender tries them.
using PayloadPathList = std::vector<std::unique_ptr<PayloadPath>>;

} // namespace monarch
