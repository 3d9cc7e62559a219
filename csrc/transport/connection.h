#pragma once

#include <atomic>
#include <deque>
#include <map>
#include <tuple>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "transport/channel_registry.h"
#include "transport/rdma/rdma_endpoint.h"
#include "transport/remote_read.h"
#include "transport/socket.h"
#include "transport/transfer.h"

namespace monarch {

class EventLoop;

// Identity of the process endpoint at the other end, from its handshake.
struct PeerIdentity {
  uint64_t endpointId = 0;
  uint32_t pid = 0;
  std::string address;
  uint64_t hostId = 0;
  // Same host and its memory is readable: large payloads go by remote read.
  bool remoteReadable = false;
};

// Payload bytes a link moved, by path (monotonic, for tests and diagnostics).
struct LinkCounters {
  std::atomic<uint64_t> tcpSent{0}; // sent inline on the TCP link
  std::atomic<uint64_t> remoteRead{0}; // read from the peer with process_vm_readv
  std::atomic<uint64_t> rdmaRead{0}; // read from the peer with fi_read
  std::atomic<uint64_t> rdmaFallbacks{0}; // rdma reads or registrations that fell back to TCP
};

// RDMA reads for a link to a peer on another host: payloads of at least
// `minBytes` go through `endpoint` once the peer says it can read from us.
struct RdmaLink {
  std::shared_ptr<rdma::RdmaEndpoint> endpoint; // null: every payload on TCP
  size_t minBytes = 0;
};

// A TCP link to one peer endpoint, shared by every group (channel) between
// the two. Sends are queued and written by whichever thread gets there first;
// receives are driven by the event loop, which reads each frame header,
// checks it, and reads the payload straight into the posted receive.
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  // Smaller payloads go inline on TCP even to a same-host peer: a remote read
  // costs a descriptor, a system call and an acknowledgement the sender waits
  // for, which measured slower than one TCP send up to about this size on
  // both test machines (broadcast, all_to_all and allreduce of 64-256 KiB).
  static constexpr size_t kRemoteReadMinBytes = 256 * 1024;

  // Payloads of at least `remoteReadMinBytes` go by remote read when the
  // peer allows it (see remote_read.h), or by RDMA read (see RdmaLink).
  Connection(
      Socket socket, PeerIdentity peer, ChannelRegistry* channels, EventLoop* loop, RdmaLink rdma = {},
      size_t remoteReadMinBytes = kRemoteReadMinBytes);
  ~Connection();

  // Registers with the event loop; frames flow from then on.
  void start();

  void postSend(const FrameHeader& header, const TransferPtr& transfer);
  // Fire-and-forget control frame (error notice, heartbeat).
  void sendControl(const FrameHeader& header, std::string payload);

  // Event loop callback.
  void onEvents(uint32_t events);
  // Event loop timer: sends a heartbeat when the link has been quiet for
  // `interval`, and fails the link when nothing came from the peer for
  // `timeout` (a dead, stopped, deadlocked or cut-off peer).
  void checkLiveness(Clock::time_point now, std::chrono::milliseconds interval, std::chrono::milliseconds timeout);

  // Finishes a data frame that announced a RemoteRegion or an RdmaRegion
  // (`descriptor`): checks it against `target`, copies from the peer's
  // memory, acknowledges and completes `target` (at once for a remote read,
  // when the RDMA read finishes for one). A mismatch fails `channel`.
  void readRemotePayload(const FrameHeader& header, const char* descriptor, const TransferPtr& target, int rank,
                         Channel& channel);

  // Breaks the link: pending sends fail, every channel learns the peer is gone.
  void fail(const std::string& reason);
  // Orderly close: says goodbye, flushes what is queued (until `deadline`)
  // and closes our direction, so the peer knows no failure happened.
  void closeGracefully(Deadline deadline);
  bool failed() const {
    return failed_.load();
  }
  const PeerIdentity& peer() const {
    return peer_;
  }
  const LinkCounters& counters() const {
    return counters_;
  }
  // Whether large payloads to this peer go by RDMA read.
  bool sendsByRdma() const {
    return rdmaPeerReads_.load();
  }

 private:
  struct Outgoing {
    FrameHeader header;
    const char* data;
    size_t bytes;
    TransferPtr transfer; // null for control frames
    std::string ownedPayload;
    size_t sent = 0; // header and payload bytes written so far
  };

  // Writes queued frames until the socket would block. Returns the sends that
  // finished, to be completed outside the lock.
  std::vector<TransferPtr> flushLocked(std::string* error);
  void enqueue(Outgoing outgoing);
  // A send whose payload the peer reads remotely completes on its ack.
  using ReadKey = std::tuple<uint64_t, bool, uint64_t, uint32_t>; // channel, p2p, seq, step
  static ReadKey readKeyOf(const FrameHeader& header);
  void onReadDone(const FrameHeader& header);
  void sendReadDone(const FrameHeader& header, bool resendInline);
  // Announces `transfer` as a region the peer reads; false when it must go inline.
  bool announceForRead(const FrameHeader& header, const TransferPtr& transfer);
  Status completeRemoteRead(const FrameHeader& header, const RemoteRegion& region, const Transfer& target, int rank);
  void readByRdma(const FrameHeader& header, const RdmaRegion& region, const TransferPtr& target, int rank,
                  Channel& channel);
  void onRdmaAddress(const std::string& address);
  void setWriteInterest(bool enabled);

  // Reads what the socket has; returns false when the link broke.
  bool readAvailable(std::string* error);
  bool onHeaderComplete(std::string* error);
  void onPayloadComplete();

  Socket socket_;
  const PeerIdentity peer_;
  ChannelRegistry* channels_;
  EventLoop* loop_;
  std::atomic<bool> started_{false};
  std::atomic<bool> failed_{false};
  std::atomic<bool> peerSaidGoodbye_{false};
  std::atomic<Clock::rep> lastReceived_;
  std::atomic<Clock::rep> lastSent_;

  const std::shared_ptr<rdma::RdmaEndpoint> rdma_; // null: no RDMA to this peer
  const size_t rdmaMinBytes_;
  std::atomic<rdma::PeerAddress> rdmaPeer_{rdma::kNoPeer}; // set before we say kRdmaReady
  std::atomic<bool> rdmaPeerReads_{false}; // the peer said kRdmaReady
  LinkCounters counters_;
  const size_t remoteReadMinBytes_;
  std::mutex sendMutex_;
  std::deque<Outgoing> sendQueue_;
  bool writeInterest_ = false;
  std::map<ReadKey, std::deque<TransferPtr>> awaitingRead_; // guarded by sendMutex_
  // Receives whose RDMA read failed, waiting for the payload inline.
  std::map<ReadKey, TransferPtr> awaitingResend_; // guarded by sendMutex_

  // Receive state, touched only by the event loop thread.
  enum class RxState { kHeader, kPayload };
  RxState rxState_ = RxState::kHeader;
  FrameHeader rxHeader_{};
  size_t rxHave_ = 0;
  std::shared_ptr<Channel> rxChannel_; // null: discard the payload
  TransferPtr rxTarget_; // posted receive being filled, if any
  Status rxTargetStatus_; // whether the target matched the header
  std::unique_ptr<char[]> rxBuffer_; // payload without a posted receive
  char rxDescriptor_[sizeof(RdmaRegion)]; // payload of a remote or rdma read frame
};

} // namespace monarch
