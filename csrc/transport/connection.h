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
#include "transport/payload_path.h"
#include "transport/socket.h"
#include "transport/transfer.h"

namespace monarch {

class EventLoop;

// A TCP link to one peer Fabric, shared by every group (channel) between
// the two: framing and liveness. Sends are queued and written by whichever
// thread gets there first; receives are driven by the event loop, which
// reads each frame header, checks it, and reads the payload straight into
// the posted receive. How a payload travels is up to the link's payload
// paths (payload_path.h): the first that takes a send carries it, and a
// frame that names a read path hands its descriptor to that path.
class Connection : public PathLink, public std::enable_shared_from_this<Connection> {
 public:
  // `paths` in the order a sender tries them (payload_paths.h); one of them,
  // inline TCP (frameFlag() 0), takes every payload, else this throws
  // std::invalid_argument.
  Connection(Socket socket, PeerIdentity peer, ChannelRegistry* channels, EventLoop* loop, PayloadPathList paths);
  ~Connection();

  // Registers with the event loop; frames flow from then on.
  void start();

  void postSend(const FrameHeader& header, const TransferPtr& transfer);
  // Fire-and-forget control frame (error notice, heartbeat).
  void sendControl(const FrameHeader& header, std::string payload) override;
  // For the payload paths (PathLink).
  void sendInline(const FrameHeader& header, const TransferPtr& transfer) override;
  void sendDescriptor(const FrameHeader& header, std::string descriptor, const TransferPtr& transfer) override;

  // Event loop callback.
  void onEvents(uint32_t events);
  // Event loop timer: sends a heartbeat when the link has been quiet for
  // `interval`, and fails the link when nothing came from the peer for
  // `timeout` (a dead, stopped, deadlocked or cut-off peer).
  void checkLiveness(Clock::time_point now, std::chrono::milliseconds interval, std::chrono::milliseconds timeout);

  // Finishes a data frame that carried a read path's `descriptor`: checks it
  // against `target`, has the path read the payload, acknowledges and
  // completes `target` (at once or when the read finishes), or asks for the
  // payload inline when the path says so. A mismatch fails `channel`.
  void readPayload(const FrameHeader& header, const char* descriptor, const TransferPtr& target, int rank,
                   Channel& channel);

  // Breaks the link: pending sends fail, every channel learns the peer is gone.
  void fail(const std::string& reason);
  // Orderly close: says goodbye, flushes what is queued (until `deadline`)
  // and closes our direction, so the peer knows no failure happened.
  void closeGracefully(Deadline deadline);
  bool failed() const {
    return failed_.load();
  }
  const PeerIdentity& peer() const override {
    return peer_;
  }
  // Adds the payload bytes this link moved, by path, to `into`.
  void addCounters(std::map<std::string, uint64_t>& into) const;

 private:
  struct Outgoing {
    FrameHeader header;
    const char* data;
    size_t bytes;
    TransferPtr transfer; // null for control frames
    std::string ownedPayload;
    size_t sent = 0; // header and payload bytes written so far
  };

  // Writes queued frames until the socket would block or a write fails
  // (sendError_). Returns the sends that finished, to be completed outside
  // the lock.
  std::vector<TransferPtr> flushLocked();
  void enqueue(Outgoing outgoing);
  // What a transfer of group `channel` that failed with `own` reports: the
  // group's failure when it has one (a peer that closed its links, or let a
  // read fail, because the group failed elsewhere is not the cause).
  Status groupFailureOr(uint64_t channel, Status own);
  // The same for a transfer to or from `rank` that this link's loss for `why` ended.
  Status lossOf(uint64_t channel, int rank, const std::string& why);
  // A send whose payload the peer reads remotely completes on its ack.
  using ReadKey = std::tuple<uint64_t, bool, uint64_t, uint32_t>; // channel, p2p, seq, step
  static ReadKey readKeyOf(const FrameHeader& header);
  void onReadDone(const FrameHeader& header);
  void sendReadDone(const FrameHeader& header, bool resendInline);
  // After a read of `path` failed that may go inline: true when the payload
  // was asked for again, false when the link has failed meanwhile.
  bool askResend(PayloadPath& path, const FrameHeader& header, const TransferPtr& target, const Status& why);
  // The read path a frame's kFramePathMask bit names; null for none.
  PayloadPath* pathFor(uint8_t flags) const;
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

  const PayloadPathList paths_;
  PayloadPath* inline_ = nullptr; // the one of paths_ that sends everything inline
  std::mutex sendMutex_;
  std::deque<Outgoing> sendQueue_;
  std::string sendError_; // guarded by sendMutex_: the first write that failed; none follows it
  std::atomic<bool> sendFailed_{false}; // set with sendError_, read without the lock
  bool writeInterest_ = false;
  std::map<ReadKey, std::deque<TransferPtr>> awaitingRead_; // guarded by sendMutex_
  // Receives whose read failed, waiting for the payload inline.
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
  PayloadPath* rxPath_ = nullptr; // the read path whose descriptor the payload is
  char rxDescriptor_[kMaxPathDescriptor];
  // Reads by a payload path that failed on this pass over the socket, to be
  // completed at its end (readPayload).
  struct FailedRead {
    uint64_t channel;
    TransferPtr target;
    Status status;
    int rank;
  };
  std::vector<FailedRead> failedReads_;
};

} // namespace monarch
