#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <string>
#include <memory>
#include <vector>

#include "transport/links.h"
#include "transport/channel.h"
#include "transport/connection.h"
#include "transport/shm/peer_segments.h"
#include "transport/socket.h"
#include "transport/transfer.h"

namespace monarch {

// A group's links over TCP connections, bound to the group's channel. The
// worker thread runs one op at a time through the Links interface; point-to-
// point transfers are posted from the caller's thread outside any op.
class GroupLinks : public Links {
 public:
  // `sharedRegionBytes` > 0 lets the group's ranks on this host map a
  // segment of that size each (hostRegions()).
  GroupLinks(
      int rank,
      uint64_t hostId,
      uint64_t endpointId,
      size_t sharedRegionBytes,
      std::vector<std::shared_ptr<Connection>> connectionByRank,
      std::shared_ptr<Channel> channel,
      std::shared_ptr<CompletionSignal> signal,
      const std::atomic<bool>* aborted);

  int rank() const override {
    return rank_;
  }
  int size() const override {
    return static_cast<int>(connections_.size());
  }
  uint64_t hostOf(int rank) const override;

  void beginOp(uint64_t seq, const OpSignature& signature, Deadline deadline, std::shared_ptr<void> keepalive);
  // Forgets the op's transfers (waiting for them is the algorithm's job).
  // `succeeded`: the op completed on this rank.
  void endOp(bool succeeded);

  Handle send(int peer, const void* data, size_t bytes) override;
  Handle recv(int peer, void* data, size_t bytes) override;
  void wait(Handle handle) override;
  void waitAll() override;
  uint64_t sequence() const override {
    return seq_;
  }
  const OpSignature& signature() const override {
    return signature_;
  }
  void announce(int peer, Announce when) override;
  [[noreturn]] void failMismatch(int peer, const std::string& how) override;
  void* workspace(size_t bytes, Workspace slot) override;
  SharedRegions* hostRegions() override;
  // Unmaps the shared-memory segments for good; no op may run after it.
  void releaseSharedMemory();

  // Point-to-point, tagged; `peer` < 0 receives from any source.
  // `onComplete` runs once the transfer is done, on the thread that did it.
  using Completion = std::function<void(const Status&, int sourceRank)>;
  void postTaggedSend(
      int peer, uint64_t tag, const OpSignature& signature, const void* data, size_t bytes,
      std::shared_ptr<void> keepalive, Completion onComplete);
  void postTaggedRecv(
      int peer, uint64_t tag, const OpSignature& signature, void* data, size_t bytes,
      std::shared_ptr<void> keepalive, Completion onComplete);

  Channel& channel() {
    return *channel_;
  }
  const std::vector<std::shared_ptr<Connection>>& connections() const {
    return connections_;
  }
  // Payload bytes this rank has posted to each peer so far (diagnostics).
  std::vector<uint64_t> payloadBytesSent() const;
  // What the links' payload paths moved, summed over peers, by counter
  // (PayloadPaths::zeroCounters() names them).
  std::map<std::string, uint64_t> transportBytes() const;

 private:
  TransferPtr makeTransfer(Transfer::Direction direction, int peer, void* data, size_t bytes);
  // Blocks until `transfer` is done, the op's deadline passes or the group aborts.
  void waitTransfer(const TransferPtr& transfer);
  // Throws OpFailure when the group has broken or aborted or the op's
  // deadline has passed (`timedOut`: the caller saw it pass) while this
  // rank was `waiting` (on) `peer`.
  void throwIfStopped(int peer, const std::string& waiting, bool timedOut) const;
  void checkPeer(int peer) const;

  const int rank_;
  const uint64_t hostId_;
  const uint64_t endpointId_;
  const size_t sharedRegionBytes_;
  std::vector<std::shared_ptr<Connection>> connections_;
  std::unique_ptr<std::atomic<uint64_t>[]> bytesSent_;
  std::shared_ptr<Channel> channel_;
  std::shared_ptr<CompletionSignal> signal_;
  const std::atomic<bool>* aborted_;

  // Current op, touched only by the worker thread.
  uint64_t seq_ = 0;
  OpSignature signature_;
  Deadline deadline_;
  std::shared_ptr<void> keepalive_;
  std::vector<TransferPtr> transfers_;
  std::vector<uint32_t> sendSteps_;
  std::vector<uint32_t> recvSteps_;
  std::vector<int> owedAnnouncements_; // peers announce() named, not yet sent
  // Grow-only scratch, one buffer per Workspace slot.
  std::unique_ptr<char[]> workspaces_[3];
  size_t workspaceBytes_[3] = {0, 0, 0};
  // Set up among hostRanks_ at the first op that asks; one attempt per
  // group, so that every rank of this host gives up alike when it fails.
  std::vector<int> hostRanks_;
  bool mayShareMemory_ = false;
  std::unique_ptr<PeerSegments> segments_;
};

} // namespace monarch
