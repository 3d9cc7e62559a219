#pragma once

// Same-host single-copy transfers. A sender on the same host does not push a
// large payload through the socket: it sends a RemoteRegion naming its
// buffer, and the receiver copies straight from the sender's memory into the
// posted tensor (cross_memory.h), then acknowledges so that the sender may
// reuse the buffer.

#include <atomic>

#include "transport/payload_path.h"

namespace monarch {

class RemoteReadPath : public PayloadPath {
 public:
  static constexpr uint8_t kFrameFlag = 0x2;
  static constexpr const char* kReadCounter = "remote_read";
  // Smaller payloads go inline on TCP even to a same-host peer: a remote read
  // costs a descriptor, a system call and an acknowledgement the sender waits
  // for, which measured slower than one TCP send up to about this size on
  // both test machines (broadcast, all_to_all and allreduce of 64-256 KiB).
  static constexpr size_t kMinBytes = 256 * 1024;

  // Sends by remote read only when `sends` (the peer is on this host and
  // this process may read its memory, hence it ours); serves the peer's
  // remote reads whatever `sends` says.
  RemoteReadPath(uint32_t peerPid, bool sends, size_t minBytes = kMinBytes)
      : peerPid_(peerPid), sends_(sends), minBytes_(minBytes) {}

  const char* name() const override {
    return "remote";
  }
  uint8_t frameFlag() const override {
    return kFrameFlag;
  }
  bool send(PathLink& link, const FrameHeader& header, const TransferPtr& transfer) override;
  size_t descriptorBytes() const override;
  uint64_t announcedBytes(const char* descriptor) const override;
  void read(const char* descriptor, const TransferPtr& target, int rank, ReadDone done) override;
  void addCounters(std::map<std::string, uint64_t>& into) const override;

 private:
  const uint32_t peerPid_;
  const bool sends_;
  const size_t minBytes_;
  std::atomic<uint64_t> bytesRead_{0};
};

} // namespace monarch
