#include "transport/group_links.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "transport/payload_paths.h"
#include "transport/sub_links.h"
#include "common/op_failure.h"

namespace monarch {

GroupLinks::GroupLinks(
    int rank,
    uint64_t hostId,
    uint64_t endpointId,
    size_t sharedRegionBytes,
    std::vector<std::shared_ptr<Connection>> connectionByRank,
    std::shared_ptr<Channel> channel,
    std::shared_ptr<CompletionSignal> signal,
    const std::atomic<bool>* aborted)
    : rank_(rank),
      hostId_(hostId),
      endpointId_(endpointId),
      sharedRegionBytes_(sharedRegionBytes),
      connections_(std::move(connectionByRank)),
      bytesSent_(new std::atomic<uint64_t>[connections_.size()]()),
      channel_(std::move(channel)),
      signal_(std::move(signal)),
      aborted_(aborted),
      sendSteps_(connections_.size(), 0),
      recvSteps_(connections_.size(), 0) {
  channel_->bindPeers(connections_);
  channel_->setSignal(signal_);
  hostRanks_ = ranksOnThisHost();
  mayShareMemory_ = sharedRegionBytes_ > 0 && hostRanks_.size() > 1;
}

void GroupLinks::releaseSharedMemory() {
  mayShareMemory_ = false;
  segments_.reset();
}

SharedRegions* GroupLinks::hostRegions() {
  if (segments_) {
    return segments_.get();
  }
  if (!mayShareMemory_) {
    return nullptr;
  }
  mayShareMemory_ = false;
  std::vector<PeerSegments::Owner> owners;
  for (int peer : hostRanks_) {
    owners.push_back(
        peer == rank_ ? PeerSegments::Owner{::getpid(), endpointId_}
                      : PeerSegments::Owner{static_cast<pid_t>(connections_[peer]->peer().pid), connections_[peer]->peer().endpointId});
  }
  // Only this host's ranks take part, numbered by their place in hostRanks_.
  const auto me = std::find(hostRanks_.begin(), hostRanks_.end(), rank_) - hostRanks_.begin();
  SubLinks onHost(*this, hostRanks_, static_cast<int>(me));
  segments_ = PeerSegments::setUp(
      onHost, owners, channel_->id(), sharedRegionBytes_, [this](int onHostRank) {
        const int peer = onHostRank < 0 ? -1 : hostRanks_[onHostRank];
        throwIfStopped(peer, "waiting in shared memory for", /*timedOut=*/false);
        // A peer that shut its group down writes nothing more here either:
        // the wait fails as a receive from it would (Channel::departLocked).
        Status gone;
        if (peer >= 0 && channel_->refusesSendTo(connections_[peer].get(), &gone)) {
          throw OpFailure(gone);
        }
      });
  return segments_.get();
}

uint64_t GroupLinks::hostOf(int rank) const {
  return rank == rank_ ? hostId_ : connections_.at(rank)->peer().hostId;
}

std::vector<uint64_t> GroupLinks::payloadBytesSent() const {
  std::vector<uint64_t> sent;
  for (size_t peer = 0; peer < connections_.size(); ++peer) {
    sent.push_back(bytesSent_[peer].load());
  }
  return sent;
}

std::map<std::string, uint64_t> GroupLinks::transportBytes() const {
  std::map<std::string, uint64_t> total = PayloadPaths::zeroCounters();
  for (const auto& connection : connections_) {
    if (connection) {
      connection->addCounters(total);
    }
  }
  return total;
}

void GroupLinks::beginOp(uint64_t seq, const OpSignature& signature, Deadline deadline, std::shared_ptr<void> keepalive) {
  seq_ = seq;
  signature_ = signature;
  deadline_ = deadline;
  keepalive_ = std::move(keepalive);
  transfers_.clear();
  std::fill(sendSteps_.begin(), sendSteps_.end(), 0);
  std::fill(recvSteps_.begin(), recvSteps_.end(), 0);
  owedAnnouncements_.clear();
  channel_->startOp(seq, signature);
}

void GroupLinks::endOp(bool succeeded) {
  // Frames left unclaimed by an op that failed part way are no evidence of
  // a mismatch, so only a clean finish is reported (and only a finished op
  // is one that a peer may still finish after this rank leaves: leave()).
  bool clean = succeeded;
  {
    std::lock_guard<std::mutex> guard(signal_->mutex);
    for (auto& transfer : transfers_) {
      clean = clean && transfer->done && transfer->status.ok();
    }
  }
  transfers_.clear();
  keepalive_.reset();
  if (clean) {
    channel_->finishOp(seq_, signature_);
  }
}

void GroupLinks::checkPeer(int peer) const {
  if (peer < 0 || peer >= size() || peer == rank_) {
    throw std::logic_error("algorithm addressed invalid peer " + std::to_string(peer));
  }
}

TransferPtr GroupLinks::makeTransfer(Transfer::Direction direction, int peer, void* data, size_t bytes) {
  auto transfer = std::make_shared<Transfer>();
  transfer->direction = direction;
  transfer->data = data;
  transfer->bytes = bytes;
  transfer->peerRank = peer;
  transfer->signal = signal_;
  return transfer;
}

Links::Handle GroupLinks::send(int peer, const void* data, size_t bytes) {
  checkPeer(peer);
  TransferPtr transfer = makeTransfer(Transfer::Direction::kSend, peer, const_cast<void*>(data), bytes);
  transfer->seq = seq_;
  transfer->step = sendSteps_[peer]++;
  transfer->signature = signature_;
  transfer->keepalive = keepalive_;
  transfers_.push_back(transfer);
  bytesSent_[peer] += bytes;
  connections_[peer]->postSend(
      makeDataHeader(channel_->id(), seq_, transfer->step, signature_, bytes, false), transfer);
  return transfers_.size() - 1;
}

Links::Handle GroupLinks::recv(int peer, void* data, size_t bytes) {
  checkPeer(peer);
  TransferPtr transfer = makeTransfer(Transfer::Direction::kRecv, peer, data, bytes);
  transfer->seq = seq_;
  transfer->step = recvSteps_[peer]++;
  transfer->signature = signature_;
  transfer->keepalive = keepalive_;
  transfers_.push_back(transfer);
  channel_->postRecv(connections_[peer].get(), transfer);
  return transfers_.size() - 1;
}

void GroupLinks::announce(int peer, Announce when) {
  checkPeer(peer);
  if (when == Announce::kNow) {
    connections_[peer]->sendControl(makeSignatureHeader(channel_->id(), seq_, signature_), {});
  } else {
    owedAnnouncements_.push_back(peer);
  }
}

void GroupLinks::failMismatch(int peer, const std::string& how) {
  Status status = mismatchStatus(seq_, signature_, peer, how);
  channel_->fail(status, /*tellPeers=*/true);
  throw OpFailure(status);
}

void GroupLinks::wait(Handle handle) {
  waitTransfer(transfers_.at(handle));
}

void* GroupLinks::workspace(size_t bytes, Workspace slot) {
  auto index = static_cast<size_t>(slot);
  if (workspaceBytes_[index] < bytes) {
    workspaces_[index].reset(new char[bytes]);
    workspaceBytes_[index] = bytes;
  }
  return workspaces_[index].get();
}

void GroupLinks::waitAll() {
  for (auto& transfer : transfers_) {
    waitTransfer(transfer);
  }
}

void GroupLinks::postTaggedSend(
    int peer, uint64_t tag, const OpSignature& signature, const void* data, size_t bytes,
    std::shared_ptr<void> keepalive, Completion onComplete) {
  checkPeer(peer);
  TransferPtr transfer = makeTransfer(Transfer::Direction::kSend, peer, const_cast<void*>(data), bytes);
  transfer->pointToPoint = true;
  transfer->seq = tag;
  transfer->signature = signature;
  transfer->keepalive = std::move(keepalive);
  transfer->onComplete = std::move(onComplete);
  Status broken;
  if (channel_->refusesSendTo(connections_[peer].get(), &broken)) {
    transfer->complete(broken, -1);
    return;
  }
  bytesSent_[peer] += bytes;
  connections_[peer]->postSend(makeDataHeader(channel_->id(), tag, 0, signature, bytes, true), transfer);
}

void GroupLinks::postTaggedRecv(
    int peer, uint64_t tag, const OpSignature& signature, void* data, size_t bytes,
    std::shared_ptr<void> keepalive, Completion onComplete) {
  if (peer >= 0) {
    checkPeer(peer);
  }
  TransferPtr transfer = makeTransfer(Transfer::Direction::kRecv, peer, data, bytes);
  transfer->pointToPoint = true;
  transfer->seq = tag;
  transfer->signature = signature;
  transfer->keepalive = std::move(keepalive);
  transfer->onComplete = std::move(onComplete);
  channel_->postRecv(peer >= 0 ? connections_[peer].get() : nullptr, transfer);
}

void GroupLinks::waitTransfer(const TransferPtr& transfer) {
  if (!owedAnnouncements_.empty()) {
    bool done;
    {
      std::lock_guard<std::mutex> guard(signal_->mutex);
      done = transfer->done;
    }
    if (!done) {
      // About to block: the announcements go out now (Links::announce).
      const FrameHeader header = makeSignatureHeader(channel_->id(), seq_, signature_);
      for (int peer : owedAnnouncements_) {
        connections_[peer]->sendControl(header, {});
      }
      owedAnnouncements_.clear();
    }
  }
  std::unique_lock<std::mutex> lock(signal_->mutex);
  signal_->cv.wait_until(
      lock, deadline_, [&] { return transfer->done || aborted_->load() || channel_->broken(); });
  if (transfer->done && transfer->status.ok()) {
    return;
  }
  if (transfer->done) {
    throw OpFailure(transfer->status);
  }
  lock.unlock();
  throwIfStopped(
      transfer->peerRank, transfer->direction == Transfer::Direction::kSend ? "sending to" : "receiving from",
      /*timedOut=*/true);
}

void GroupLinks::throwIfStopped(int peer, const std::string& waiting, bool timedOut) const {
  Status broken;
  if (channel_->errored(&broken)) {
    throw OpFailure(broken);
  }
  if (aborted_->load()) {
    throw OpFailure(Status::error(ErrorKind::kAborted, {}, "the group was aborted"));
  }
  if (timedOut || Clock::now() >= deadline_) {
    throw OpFailure(Status::error(
        ErrorKind::kTimeout, peer >= 0 ? std::vector<int>{peer} : std::vector<int>{},
        "Timed out " + waiting + (peer >= 0 ? " rank " + std::to_string(peer) : std::string(" any rank"))));
  }
}

} // namespace monarch
