#include "transport/channel.h"

#include <algorithm>
#include <cstring>
#include <sstream>

#include "transport/connection.h"

namespace monarch {

namespace {

// Removes and returns the oldest entry of a per-key queue, dropping the key
// once its queue is empty.
template <typename Map>
typename Map::mapped_type::value_type popOldest(Map& map, typename Map::iterator it) {
  auto value = std::move(it->second.front());
  it->second.pop_front();
  if (it->second.empty()) {
    map.erase(it);
  }
  return value;
}

} // namespace

void Channel::bindPeers(const std::vector<std::shared_ptr<Connection>>& connectionByRank) {
  std::lock_guard<std::mutex> guard(mutex_);
  finishedSeq_ = 0; // a new group's sequence numbers start over
  started_.clear();
  earlySignatures_.clear();
  rankByConnection_.clear();
  peers_.clear();
  for (size_t rank = 0; rank < connectionByRank.size(); ++rank) {
    if (connectionByRank[rank]) {
      rankByConnection_[connectionByRank[rank].get()] = static_cast<int>(rank);
      peers_.push_back(connectionByRank[rank]);
    }
  }
}

void Channel::setSignal(const std::shared_ptr<CompletionSignal>& signal) {
  std::lock_guard<std::mutex> guard(mutex_);
  signal_ = signal;
}

int Channel::rankOf(Connection* connection) {
  std::lock_guard<std::mutex> guard(mutex_);
  auto it = rankByConnection_.find(connection);
  return it == rankByConnection_.end() ? -1 : it->second;
}

Channel::Key Channel::keyOf(Connection* from, const FrameHeader& header) {
  bool p2p = (header.flags & kFramePointToPoint) != 0;
  return Key{from, p2p, header.seq, p2p ? 0u : header.step};
}

Channel::Key Channel::keyOf(Connection* from, const Transfer& transfer) {
  return Key{from, transfer.pointToPoint, transfer.seq, transfer.pointToPoint ? 0u : transfer.step};
}

void Channel::fulfil(const TransferPtr& transfer, Connection* from, Unexpected& message) {
  int rank = rankOf(from);
  if (message.header.flags & kFramePathMask) {
    // Completes `transfer` itself (at once, or when the path's read finishes).
    from->readPayload(message.header, message.payload.get(), transfer, rank, *this);
    return;
  }
  Status status = checkFrameMatches(
      message.header, message.header.payloadBytes, transfer->signature, transfer->bytes, rank, transfer->seq);
  if (status.ok() && transfer->bytes > 0) {
    std::memcpy(transfer->data, message.payload.get(), transfer->bytes);
  }
  if (status.kind == ErrorKind::kMismatch) {
    fail(status, /*tellPeers=*/true);
  }
  transfer->complete(std::move(status), rank);
}

void Channel::postRecv(Connection* from, const TransferPtr& transfer) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (!error_.ok()) {
    Status status = error_;
    lock.unlock();
    transfer->complete(std::move(status), -1);
    return;
  }
  if (from == nullptr) {
    // Any source: take the oldest buffered frame with this tag from any peer.
    for (auto it = unexpected_.begin(); it != unexpected_.end(); ++it) {
      if (it->first.pointToPoint && it->first.seq == transfer->seq) {
        Connection* source = it->first.from;
        Unexpected message = popOldest(unexpected_, it);
        lock.unlock();
        fulfil(transfer, source, message);
        return;
      }
    }
    postedAnySource_[transfer->seq].push_back(transfer);
    return;
  }
  Key key = keyOf(from, *transfer);
  auto it = unexpected_.find(key);
  if (it != unexpected_.end()) {
    Unexpected message = popOldest(unexpected_, it);
    lock.unlock();
    fulfil(transfer, from, message);
    return;
  }
  auto gone = departed_.find(from);
  if (gone != departed_.end()) {
    Status status = gone->second;
    lock.unlock();
    transfer->complete(std::move(status), -1);
    return;
  }
  posted_[key].push_back(transfer);
}

TransferPtr Channel::claimPosted(Connection* from, const FrameHeader& header) {
  std::lock_guard<std::mutex> guard(mutex_);
  return claimPostedLocked(from, header);
}

TransferPtr Channel::claimPostedLocked(Connection* from, const FrameHeader& header) {
  if (header.flags & kFrameSignatureOnly) {
    return nullptr; // checked in deliverUnexpected, never claimed
  }
  Key key = keyOf(from, header);
  auto it = posted_.find(key);
  if (it != posted_.end()) {
    return popOldest(posted_, it);
  }
  if (key.pointToPoint) {
    auto any = postedAnySource_.find(header.seq);
    if (any != postedAnySource_.end()) {
      return popOldest(postedAnySource_, any);
    }
  }
  return nullptr;
}

void Channel::deliverUnexpected(Connection* from, const FrameHeader& header, std::unique_ptr<char[]> payload) {
  Unexpected message{header, std::move(payload)};
  std::unique_lock<std::mutex> lock(mutex_);
  if (!error_.ok()) {
    return; // the group is broken; nobody will receive this
  }
  // A receive may have been posted while the payload was in flight.
  TransferPtr transfer = claimPostedLocked(from, header);
  if (transfer) {
    lock.unlock();
    fulfil(transfer, from, message);
    return;
  }
  if (header.flags & kFrameSignatureOnly) {
    if (started_.empty() || header.seq > started_.rbegin()->first) {
      earlySignatures_.emplace_back(from, header);
      return;
    }
    Status mismatch = checkSignatureLocked(from, header);
    lock.unlock();
    if (!mismatch.ok()) {
      fail(mismatch, /*tellPeers=*/true);
    }
    return;
  }
  if (!(header.flags & kFramePointToPoint)) {
    Status mismatch = header.seq <= finishedSeq_ ? strayFrameLocked(from, header) : checkSignatureLocked(from, header);
    if (!mismatch.ok()) {
      lock.unlock();
      fail(mismatch, /*tellPeers=*/true);
      return;
    }
  }
  unexpected_[keyOf(from, header)].push_back(std::move(message));
}

Status Channel::checkSignatureLocked(Connection* from, const FrameHeader& header) {
  auto it = started_.find(header.seq);
  if (it == started_.end()) {
    return {};
  }
  auto rank = rankByConnection_.find(from);
  // Sizes are compared where a receive claims the frame; here, the signature.
  return checkFrameMatches(header, 0, it->second, 0, rank == rankByConnection_.end() ? -1 : rank->second, header.seq);
}

void Channel::startOp(uint64_t seq, const OpSignature& signature) {
  Status left;
  Status mismatch;
  {
    std::lock_guard<std::mutex> guard(mutex_);
    progress_ = seq; // under the lock: peerLeft() reads it with finishedSeq_
    if (leftAfter_ != 0 && seq > leftAfter_) {
      left = leftStatus_; // a peer that left never runs this op
    }
    started_[seq] = signature;
    while (started_.size() > kSignatureHistory) {
      started_.erase(started_.begin());
    }
    for (auto& entry : unexpected_) {
      if (mismatch.ok() && !entry.first.pointToPoint && entry.first.seq == seq) {
        mismatch = checkSignatureLocked(entry.first.from, entry.second.front().header);
      }
    }
    auto early = earlySignatures_.begin();
    while (early != earlySignatures_.end()) {
      if (early->second.seq == seq) {
        if (mismatch.ok()) {
          mismatch = checkSignatureLocked(early->first, early->second);
        }
        early = earlySignatures_.erase(early);
      } else {
        ++early;
      }
    }
  }
  if (!left.ok()) {
    fail(left, /*tellPeers=*/false); // every peer had the leaver's notice
  } else if (!mismatch.ok()) {
    fail(mismatch, /*tellPeers=*/true);
  }
}

void Channel::finishOp(uint64_t seq, const OpSignature& signature) {
  Status stray;
  Status left;
  {
    std::lock_guard<std::mutex> guard(mutex_);
    finishedSeq_ = seq;
    finishedSignature_ = signature;
    for (auto& entry : unexpected_) {
      if (!entry.first.pointToPoint && entry.first.seq <= seq) {
        stray = strayFrameLocked(entry.first.from, entry.second.front().header);
        break;
      }
    }
    if (leftAfter_ != 0 && seq >= leftAfter_) {
      left = leftStatus_; // this rank is done with the last op a peer that left ran
    }
  }
  if (!stray.ok()) {
    fail(stray, /*tellPeers=*/true);
  } else if (!left.ok()) {
    fail(left, /*tellPeers=*/false); // every peer had the leaver's notice
  }
}

Status Channel::strayFrameLocked(Connection* from, const FrameHeader& header) {
  auto it = rankByConnection_.find(from);
  int rank = it == rankByConnection_.end() ? -1 : it->second;
  std::ostringstream out;
  out << "collective mismatch at sequence number " << header.seq << ": rank " << rank << " sent data for "
      << signatureFrom(header).describe() << " but this rank ";
  if (header.seq == finishedSeq_) {
    out << "called " << finishedSignature_.describe() << ", which expects no such data from rank " << rank;
  } else {
    out << "had finished that op without expecting data from rank " << rank;
  }
  return Status::error(ErrorKind::kMismatch, {rank}, out.str());
}

void Channel::fail(const Status& status, bool tellPeers) {
  failAndTell(status, tellPeers, /*leaving=*/false);
}

void Channel::leave(const Status& status) {
  failAndTell(status, /*tellPeers=*/true, /*leaving=*/true);
}

void Channel::failAndTell(const Status& status, bool tellPeers, bool leaving) {
  std::vector<TransferPtr> pending;
  std::vector<std::shared_ptr<Connection>> notify;
  // 0: the peers fail at once (the notice's seq, peerLeft()).
  uint64_t lastSeq = 0;
  {
    std::lock_guard<std::mutex> guard(mutex_);
    if (error_.ok()) {
      error_ = status;
      broken_ = true;
      if (tellPeers) {
        notify = peers_;
        // Only an op that completed here is reported finished (endOp()).
        lastSeq = leaving ? finishedSeq_ : 0;
      }
    }
    for (auto& entry : posted_) {
      pending.insert(pending.end(), entry.second.begin(), entry.second.end());
    }
    for (auto& entry : postedAnySource_) {
      pending.insert(pending.end(), entry.second.begin(), entry.second.end());
    }
    posted_.clear();
    postedAnySource_.clear();
    unexpected_.clear();
  }
  for (auto& transfer : pending) {
    transfer->complete(status, -1);
  }
  if (auto signal = signal_.lock()) {
    // Wakes a waiter whose send may never be acknowledged now.
    { std::lock_guard<std::mutex> guard(signal->mutex); }
    signal->cv.notify_all();
  }
  if (!notify.empty()) {
    std::string payload = encodeNotice(status);
    FrameHeader header = makeControlHeader(FrameKind::kErrorNotice, id_, lastSeq, payload.size());
    for (auto& peer : notify) {
      if (!peer->failed()) {
        peer->sendControl(header, payload);
      }
    }
  }
}

void Channel::peerFailed(Connection* connection, const std::string& reason) {
  int rank = rankOf(connection);
  if (rank < 0) {
    return; // not a member of this group
  }
  fail(Status::error(ErrorKind::kPeerFailure, {rank}, "lost rank " + std::to_string(rank) + ": " + reason),
       /*tellPeers=*/true);
}

Status Channel::departedStatus(int rank) {
  return Status::error(
      ErrorKind::kPeerFailure, {rank}, "rank " + std::to_string(rank) + " shut down its group and sends no more");
}

std::vector<TransferPtr> Channel::departLocked(Connection* connection, const Status& why) {
  departed_.emplace(connection, why);
  std::vector<TransferPtr> pending;
  for (auto it = posted_.begin(); it != posted_.end();) {
    if (it->first.from == connection) {
      pending.insert(pending.end(), it->second.begin(), it->second.end());
      it = posted_.erase(it);
    } else {
      ++it;
    }
  }
  return pending;
}

void Channel::peerDeparted(Connection* connection) {
  Status why = departedStatus(rankOf(connection));
  std::vector<TransferPtr> pending;
  {
    std::lock_guard<std::mutex> guard(mutex_);
    pending = departLocked(connection, why);
  }
  for (auto& transfer : pending) {
    transfer->complete(why, -1);
  }
}

void Channel::peerLeft(Connection* connection, uint64_t lastSeq, const Status& status) {
  std::vector<TransferPtr> pending;
  bool failNow;
  {
    std::lock_guard<std::mutex> guard(mutex_);
    if (!error_.ok()) {
      return;
    }
    // Done with op lastSeq, or in one that the peer never finished.
    failNow = finishedSeq_ >= lastSeq || progress_ > lastSeq;
    if (!failNow) {
      // Op lastSeq may still finish here: every frame the peer sent for it
      // came before its notice. A receive from the peer that is not met by
      // now never will be (say, in a mismatched op): it fails now, not at
      // the op's timeout.
      if (leftAfter_ == 0 || lastSeq < leftAfter_) {
        leftAfter_ = lastSeq;
        leftStatus_ = status;
      }
      pending = departLocked(connection, status);
    }
  }
  if (failNow) {
    fail(status, /*tellPeers=*/false);
  }
  for (auto& transfer : pending) {
    transfer->complete(status, -1);
  }
}

std::vector<int> Channel::ranksBehind(uint64_t seq, Deadline deadline) {
  std::vector<std::shared_ptr<Connection>> peers;
  {
    std::lock_guard<std::mutex> guard(mutex_);
    progressReplies_.clear();
    peers = peers_;
  }
  FrameHeader query = makeControlHeader(FrameKind::kProgressQuery, id_, seq, 0);
  for (auto& peer : peers) {
    if (!peer->failed()) {
      peer->sendControl(query, {});
    }
  }
  std::unique_lock<std::mutex> lock(mutex_);
  repliesChanged_.wait_until(lock, deadline, [&] { return progressReplies_.size() == peers.size(); });
  std::vector<int> behind;
  for (auto& entry : rankByConnection_) {
    auto reply = progressReplies_.find(entry.second);
    if (reply == progressReplies_.end() || reply->second < seq) {
      behind.push_back(entry.second);
    }
  }
  std::sort(behind.begin(), behind.end());
  return behind;
}

void Channel::onProgressReply(Connection* from, uint64_t seq) {
  {
    std::lock_guard<std::mutex> guard(mutex_);
    auto it = rankByConnection_.find(from);
    if (it == rankByConnection_.end()) {
      return;
    }
    progressReplies_[it->second] = seq;
  }
  repliesChanged_.notify_all();
}

bool Channel::refusesSendTo(Connection* to, Status* status) {
  std::lock_guard<std::mutex> guard(mutex_);
  auto gone = departed_.find(to);
  if (error_.ok() && gone == departed_.end()) {
    return false;
  }
  *status = error_.ok() ? gone->second : error_;
  return true;
}

bool Channel::errored(Status* status) {
  std::lock_guard<std::mutex> guard(mutex_);
  if (error_.ok()) {
    return false;
  }
  if (status != nullptr) {
    *status = error_;
  }
  return true;
}

} // namespace monarch
