#include "transport/connection.h"

#include <poll.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <cerrno>
#include <cstring>
#include <new>
#include <stdexcept>
#include <utility>

#include "common/logging.h"
#include "transport/event_loop.h"

namespace monarch {

namespace {

constexpr size_t kDiscardChunk = 64 * 1024;

} // namespace

Connection::Connection(
    Socket socket, PeerIdentity peer, ChannelRegistry* channels, EventLoop* loop, PayloadPathList paths)
    : socket_(std::move(socket)),
      peer_(std::move(peer)),
      channels_(channels),
      loop_(loop),
      lastReceived_(Clock::now().time_since_epoch().count()),
      lastSent_(Clock::now().time_since_epoch().count()),
      paths_(std::move(paths)) {
  for (const auto& path : paths_) {
    if (path->frameFlag() == 0) {
      inline_ = path.get();
    } else if ((path->frameFlag() & kFramePathMask) != path->frameFlag() || path->descriptorBytes() > kMaxPathDescriptor) {
      throw std::invalid_argument(std::string("payload path ") + path->name() + " does not fit the frame header");
    }
  }
  if (inline_ == nullptr) {
    throw std::invalid_argument("a link needs the inline payload path");
  }
  setNonBlocking(socket_.fd(), true);
}

void Connection::checkLiveness(
    Clock::time_point now, std::chrono::milliseconds interval, std::chrono::milliseconds timeout) {
  if (failed_ || !started_) {
    return;
  }
  auto silence = now - Clock::time_point(Clock::duration(lastReceived_.load()));
  if (silence > timeout) {
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(silence).count();
    fail("no heartbeat for " + std::to_string(ms) + " ms (peer dead, stopped, hung or cut off)");
    return;
  }
  if (now - Clock::time_point(Clock::duration(lastSent_.load())) >= interval) {
    sendControl(makeControlHeader(FrameKind::kHeartbeat, 0, 0, 0), {});
  }
}

Connection::~Connection() = default;

void Connection::start() {
  if (started_.exchange(true)) {
    return; // already serving another group
  }
  lastReceived_ = Clock::now().time_since_epoch().count();
  loop_->add(socket_.fd(), EPOLLIN, [self = this](uint32_t events) { self->onEvents(events); });
  for (const auto& path : paths_) {
    path->start(*this);
  }
}

Status Connection::groupFailureOr(uint64_t channel, Status own) {
  Status groupFailure;
  return channels_->failed(channel, &groupFailure) ? groupFailure : own;
}

Status Connection::lossOf(uint64_t channel, int rank, const std::string& why) {
  return groupFailureOr(
      channel, Status::error(ErrorKind::kPeerFailure, {rank}, "lost rank " + std::to_string(rank) + ": " + why));
}

void Connection::postSend(const FrameHeader& header, const TransferPtr& transfer) {
  if (failed_) {
    transfer->complete(lossOf(header.channel, transfer->peerRank, "the link is down"), -1);
    return;
  }
  for (const auto& path : paths_) {
    if (path->send(*this, header, transfer)) {
      return;
    }
  }
}

void Connection::sendInline(const FrameHeader& header, const TransferPtr& transfer) {
  enqueue(Outgoing{header, static_cast<const char*>(transfer->data), transfer->bytes, transfer, {}});
}

void Connection::sendDescriptor(const FrameHeader& header, std::string descriptor, const TransferPtr& transfer) {
  FrameHeader announce = header;
  announce.payloadBytes = descriptor.size();
  announce.checksum = headerChecksum(announce);
  {
    std::lock_guard<std::mutex> guard(sendMutex_);
    if (!failed_) {
      // Registered before the frame leaves: the ack can come back at once.
      awaitingRead_[readKeyOf(announce)].push_back(transfer);
    }
  }
  const size_t size = descriptor.size();
  enqueue(Outgoing{announce, nullptr, size, nullptr, std::move(descriptor)});
  if (failed_) {
    transfer->complete(lossOf(header.channel, transfer->peerRank, "the link is down"), -1);
  }
}

Connection::ReadKey Connection::readKeyOf(const FrameHeader& header) {
  bool p2p = (header.flags & kFramePointToPoint) != 0;
  return ReadKey{header.channel, p2p, header.seq, p2p ? 0u : header.step};
}

void Connection::onReadDone(const FrameHeader& header) {
  TransferPtr transfer;
  {
    std::lock_guard<std::mutex> guard(sendMutex_);
    auto it = awaitingRead_.find(readKeyOf(header));
    if (it == awaitingRead_.end()) {
      return; // a stale ack after this side failed the transfer
    }
    transfer = std::move(it->second.front());
    it->second.pop_front();
    if (it->second.empty()) {
      awaitingRead_.erase(it);
    }
  }
  if (header.flags & kFrameResendInline) {
    // The peer could not read it: the payload follows on the link, and the
    // send completes once it is written.
    FrameHeader data = makeDataHeader(
        header.channel, transfer->seq, transfer->step, transfer->signature, transfer->bytes, transfer->pointToPoint);
    inline_->send(*this, data, transfer);
    return;
  }
  transfer->complete({}, transfer->peerRank);
}

void Connection::sendReadDone(const FrameHeader& header, bool resendInline) {
  FrameHeader done = makeControlHeader(FrameKind::kReadDone, header.channel, header.seq, 0);
  done.flags = (header.flags & kFramePointToPoint) | (resendInline ? kFrameResendInline : 0);
  done.step = header.step;
  done.checksum = headerChecksum(done);
  sendControl(done, {});
}

PayloadPath* Connection::pathFor(uint8_t flags) const {
  const uint8_t bit = flags & kFramePathMask;
  for (const auto& path : paths_) {
    if (bit != 0 && path->frameFlag() == bit) {
      return path.get();
    }
  }
  return nullptr;
}

void Connection::readPayload(
    const FrameHeader& header, const char* descriptor, const TransferPtr& target, int rank, Channel& channel) {
  PayloadPath* path = pathFor(header.flags); // never null: the frame was checked on arrival
  Status status = checkFrameMatches(
      header, path->announcedBytes(descriptor), target->signature, target->bytes, rank, target->seq);
  if (!status.ok()) {
    sendReadDone(header, false); // the sender's buffer is no longer needed
    if (status.kind == ErrorKind::kMismatch) {
      channel.fail(status, /*tellPeers=*/true);
    }
    target->complete(std::move(status), rank);
    return;
  }
  auto self = shared_from_this();
  path->read(descriptor, target, rank, [self, path, header, target, rank](Status result, bool resendInline) {
    if (!result.ok() && resendInline) {
      if (!self->askResend(*path, header, target, result)) {
        target->complete(self->groupFailureOr(header.channel, std::move(result)), -1);
      }
      return;
    }
    // Acknowledged whatever happened: the sender's buffer is no longer needed.
    self->sendReadDone(header, false);
    if (!result.ok() && self->loop_->onLoopThread()) {
      // A sender that gave up on its group after a failure elsewhere freed
      // the buffer, but told this rank first: its notice may sit behind this
      // frame. The failure is reported once the loop has read what came
      // (onEvents).
      self->failedReads_.push_back(FailedRead{header.channel, target, std::move(result), rank});
      return;
    }
    if (!result.ok()) {
      result = self->groupFailureOr(header.channel, std::move(result));
    }
    target->complete(std::move(result), rank);
  });
}

bool Connection::askResend(PayloadPath& path, const FrameHeader& header, const TransferPtr& target, const Status& why) {
  {
    std::lock_guard<std::mutex> guard(sendMutex_);
    if (failed_) {
      return false;
    }
    // The link still works: take the payload over it instead.
    awaitingResend_[readKeyOf(header)] = target;
  }
  MONARCH_LOG(kWarn) << why.message << "; taking it over TCP";
  path.noteFallback();
  sendReadDone(header, /*resendInline=*/true);
  return true;
}

void Connection::sendControl(const FrameHeader& header, std::string payload) {
  // enqueue() points `data` at the payload once it sits in the queue.
  enqueue(Outgoing{header, nullptr, payload.size(), nullptr, std::move(payload)});
}

void Connection::enqueue(Outgoing outgoing) {
  std::vector<TransferPtr> finished;
  {
    std::lock_guard<std::mutex> guard(sendMutex_);
    if (!failed_) {
      sendQueue_.push_back(std::move(outgoing));
      // The ownedPayload buffer may have moved with the element.
      Outgoing& queued = sendQueue_.back();
      if (!queued.transfer) {
        queued.data = queued.ownedPayload.data();
      }
      if (sendQueue_.size() == 1) {
        finished = flushLocked();
      }
    }
  }
  if (failed_ && outgoing.transfer) {
    outgoing.transfer->complete(lossOf(outgoing.header.channel, outgoing.transfer->peerRank, "the link is down"), -1);
  }
  for (auto& transfer : finished) {
    transfer->complete({}, transfer->peerRank);
  }
}

std::vector<TransferPtr> Connection::flushLocked() {
  std::vector<TransferPtr> finished;
  while (!sendQueue_.empty() && sendError_.empty()) {
    Outgoing& head = sendQueue_.front();
    const size_t headerBytes = sizeof(FrameHeader);
    iovec iov[2];
    int count = 0;
    if (head.sent < headerBytes) {
      iov[count++] = {reinterpret_cast<char*>(&head.header) + head.sent, headerBytes - head.sent};
      if (head.bytes > 0) {
        iov[count++] = {const_cast<char*>(head.data), head.bytes};
      }
    } else {
      size_t done = head.sent - headerBytes;
      iov[count++] = {const_cast<char*>(head.data) + done, head.bytes - done};
    }
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = count;
    ssize_t n = ::sendmsg(socket_.fd(), &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        setWriteInterest(true);
        return finished;
      }
      if (errno == EINTR) {
        continue;
      }
      // The link is gone, but what the peer sent before it went may still
      // be unread here: an error notice saying which rank failed first. The
      // loop thread reads all of it, then fails the link (onEvents); the
      // write interest wakes it, as the socket's error does.
      sendError_ = std::string("send failed: ") + std::strerror(errno);
      sendFailed_ = true;
      setWriteInterest(true);
      return finished;
    }
    head.sent += static_cast<size_t>(n);
    lastSent_ = Clock::now().time_since_epoch().count();
    if (head.sent == headerBytes + head.bytes) {
      if (head.transfer) {
        finished.push_back(std::move(head.transfer));
      }
      sendQueue_.pop_front();
    }
  }
  setWriteInterest(false);
  return finished;
}

void Connection::setWriteInterest(bool enabled) {
  if (writeInterest_ != enabled) {
    writeInterest_ = enabled;
    loop_->modify(socket_.fd(), EPOLLIN | (enabled ? EPOLLOUT : 0));
  }
}

void Connection::onEvents(uint32_t events) {
  std::vector<TransferPtr> finished;
  if (events & EPOLLOUT) {
    std::lock_guard<std::mutex> guard(sendMutex_);
    finished = flushLocked();
  }
  for (auto& transfer : finished) {
    transfer->complete({}, transfer->peerRank);
  }
  // Not the lock on every event: a sender may hold it for a long write.
  std::string sendError;
  if (sendFailed_) {
    std::lock_guard<std::mutex> guard(sendMutex_);
    sendError = sendError_;
  }
  std::string error;
  if (!sendError.empty() || (events & (EPOLLIN | EPOLLHUP | EPOLLERR))) {
    // After a send failed: up to the end of what the peer sent.
    readAvailable(&error);
  }
  if (error.empty()) {
    error = sendError;
  }
  if (!error.empty() || failed_) {
    loop_->remove(socket_.fd());
    const std::string reason = error.empty() ? "link closed" : error;
    fail(reason);
    // Runs on the loop thread: the frame being received fails too.
    if (rxTarget_) {
      rxTarget_->complete(lossOf(rxHeader_.channel, rxTarget_->peerRank, "link broke mid-frame: " + reason), -1);
      rxTarget_.reset();
    }
  }
  for (auto& read : std::exchange(failedReads_, {})) {
    read.target->complete(groupFailureOr(read.channel, std::move(read.status)), read.rank);
  }
}

bool Connection::readAvailable(std::string* error) {
  char discard[kDiscardChunk];
  while (true) {
    char* dest;
    size_t want;
    if (rxState_ == RxState::kHeader) {
      dest = reinterpret_cast<char*>(&rxHeader_) + rxHave_;
      want = sizeof(FrameHeader) - rxHave_;
    } else if (rxPath_) {
      dest = rxDescriptor_ + rxHave_; // onHeaderComplete checked its size
      want = rxHeader_.payloadBytes - rxHave_;
    } else if (rxTarget_ && rxTargetStatus_.ok()) {
      dest = static_cast<char*>(rxTarget_->data) + rxHave_;
      want = rxHeader_.payloadBytes - rxHave_;
    } else if (rxBuffer_) {
      dest = rxBuffer_.get() + rxHave_;
      want = rxHeader_.payloadBytes - rxHave_;
    } else {
      dest = discard;
      want = std::min<size_t>(kDiscardChunk, rxHeader_.payloadBytes - rxHave_);
    }
    ssize_t n = ::recv(socket_.fd(), dest, want, MSG_DONTWAIT);
    if (n == 0) {
      *error = "connection closed by peer";
      return false;
    }
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        return true;
      }
      if (errno == EINTR) {
        continue;
      }
      *error = std::string("receive failed: ") + std::strerror(errno);
      return false;
    }
    rxHave_ += static_cast<size_t>(n);
    lastReceived_ = Clock::now().time_since_epoch().count();
    if (rxState_ == RxState::kHeader) {
      if (rxHave_ == sizeof(FrameHeader) && !onHeaderComplete(error)) {
        return false;
      }
    } else if (rxHave_ == rxHeader_.payloadBytes) {
      onPayloadComplete();
    }
  }
}

bool Connection::onHeaderComplete(std::string* error) {
  Status valid = validateHeader(rxHeader_);
  if (!valid.ok()) {
    MONARCH_LOG(kError) << "closing link to " << peer_.address << " (pid " << peer_.pid
                        << "): " << valid.message;
    *error = valid.message;
    return false;
  }
  auto kind = static_cast<FrameKind>(rxHeader_.kind);
  rxPath_ = kind == FrameKind::kData ? pathFor(rxHeader_.flags) : nullptr;
  if (kind == FrameKind::kData && (rxHeader_.flags & kFramePathMask) &&
      (!rxPath_ || rxHeader_.payloadBytes != rxPath_->descriptorBytes())) {
    *error = rxPath_ ? std::string("corrupt frame: ") + rxPath_->name() + " read frame without a region"
                     : "corrupt frame: no payload path for flags " + std::to_string(rxHeader_.flags);
    MONARCH_LOG(kError) << "closing link to " << peer_.address << " (pid " << peer_.pid << "): " << *error;
    return false;
  }
  rxState_ = RxState::kPayload;
  rxHave_ = 0;
  if (kind == FrameKind::kGoodbye) {
    peerSaidGoodbye_ = true;
  }
  bool perChannel = kind != FrameKind::kHeartbeat && kind != FrameKind::kGoodbye && kind != FrameKind::kReadDone &&
      kind != FrameKind::kPathAddress && kind != FrameKind::kPathReady;
  rxChannel_ = perChannel ? channels_->forIncoming(rxHeader_.channel) : nullptr;
  rxTarget_.reset();
  rxTargetStatus_ = Status();
  if (kind == FrameKind::kData && rxChannel_) {
    if (!rxPath_) {
      std::lock_guard<std::mutex> guard(sendMutex_);
      auto resent = awaitingResend_.find(readKeyOf(rxHeader_));
      if (resent != awaitingResend_.end()) {
        rxTarget_ = std::move(resent->second); // the payload of a read that failed
        awaitingResend_.erase(resent);
      }
    }
    if (!rxTarget_) {
      rxTarget_ = rxChannel_->claimPosted(this, rxHeader_);
    }
    // A read is checked once its descriptor has arrived.
    if (rxTarget_ && !rxPath_) {
      rxTargetStatus_ = checkFrameMatches(
          rxHeader_, rxHeader_.payloadBytes, rxTarget_->signature, rxTarget_->bytes, rxChannel_->rankOf(this),
          rxTarget_->seq);
      if (!rxTargetStatus_.ok()) {
        // Never write a mismatched payload into the tensor: fail the op now
        // and drop the bytes.
        rxTarget_->complete(rxTargetStatus_, -1);
        rxChannel_->fail(rxTargetStatus_, /*tellPeers=*/true);
        rxTarget_.reset();
        rxChannel_.reset();
      }
    }
  }
  bool keepPayload = (rxChannel_ && !rxTarget_ && !rxPath_) || kind == FrameKind::kPathAddress;
  rxBuffer_.reset();
  if (keepPayload && rxHeader_.payloadBytes > 0) {
    // The length is the peer's word: a size this process cannot allocate
    // fails the link, not the process (std::bad_alloc on the loop thread).
    rxBuffer_.reset(new (std::nothrow) char[rxHeader_.payloadBytes]); // no zero fill: it is overwritten
    if (!rxBuffer_) {
      *error = "cannot buffer a frame of " + std::to_string(rxHeader_.payloadBytes) + " bytes";
      return false;
    }
  }
  if (rxHeader_.payloadBytes == 0) {
    onPayloadComplete();
  }
  return true;
}

void Connection::onPayloadComplete() {
  auto kind = static_cast<FrameKind>(rxHeader_.kind);
  const bool described = rxPath_ != nullptr; // a read path's descriptor, not data
  if (described && rxTarget_) {
    readPayload(rxHeader_, rxDescriptor_, rxTarget_, rxChannel_->rankOf(this), *rxChannel_);
  } else if (described && rxChannel_) {
    std::unique_ptr<char[]> descriptor(new char[rxHeader_.payloadBytes]);
    std::memcpy(descriptor.get(), rxDescriptor_, rxHeader_.payloadBytes);
    rxChannel_->deliverUnexpected(this, rxHeader_, std::move(descriptor));
  } else if (described) {
    sendReadDone(rxHeader_, false); // the group is gone; still release the sender's buffer
  } else if (kind == FrameKind::kPathAddress || kind == FrameKind::kPathReady) {
    if (PayloadPath* path = pathFor(rxHeader_.flags)) {
      path->onControl(*this, kind, rxBuffer_ ? std::string(rxBuffer_.get(), rxHeader_.payloadBytes) : std::string());
    }
  } else if (rxTarget_) {
    rxTarget_->complete({}, rxChannel_->rankOf(this));
  } else if (kind == FrameKind::kReadDone) {
    onReadDone(rxHeader_);
  } else if (rxChannel_ && kind == FrameKind::kData) {
    rxChannel_->deliverUnexpected(this, rxHeader_, std::move(rxBuffer_));
  } else if (rxChannel_ && kind == FrameKind::kProgressQuery) {
    sendControl(makeControlHeader(FrameKind::kProgressReply, rxHeader_.channel, rxChannel_->progress(), 0), {});
  } else if (rxChannel_ && kind == FrameKind::kProgressReply) {
    rxChannel_->onProgressReply(this, rxHeader_.seq);
  } else if (rxChannel_ && kind == FrameKind::kErrorNotice) {
    Status notice = decodeNotice(rxBuffer_ ? std::string(rxBuffer_.get(), rxHeader_.payloadBytes) : std::string());
    int origin = rxChannel_->rankOf(this);
    if (notice.kind == ErrorKind::kAborted) {
      // For the others, a rank that aborted is a failed peer.
      notice.kind = ErrorKind::kPeerFailure;
      notice.ranks = {origin};
    }
    notice.message = "rank " + std::to_string(origin) + " reported: " + notice.message;
    if (rxHeader_.seq != 0) {
      // The peer left in order after finishing op seq (Channel::leave).
      rxChannel_->peerLeft(this, rxHeader_.seq, notice);
    } else {
      rxChannel_->fail(notice, /*tellPeers=*/false);
    }
  }
  rxState_ = RxState::kHeader;
  rxHave_ = 0;
  rxPath_ = nullptr;
  rxTarget_.reset();
  rxChannel_.reset();
  rxBuffer_.reset();
}

void Connection::fail(const std::string& reason) {
  if (failed_.exchange(true)) {
    return;
  }
  const bool departed = peerSaidGoodbye_.load();
  MONARCH_LOG(kInfo) << "link to " << peer_.address << " (pid " << peer_.pid << ") "
                     << (departed ? "closed after goodbye" : "failed: " + reason);
  // Wakes the loop thread, which fails the frame it is receiving.
  ::shutdown(socket_.fd(), SHUT_RDWR);
  std::vector<std::pair<uint64_t, TransferPtr>> pending; // with its channel
  {
    std::lock_guard<std::mutex> guard(sendMutex_);
    for (auto& outgoing : sendQueue_) {
      if (outgoing.transfer) {
        pending.emplace_back(outgoing.header.channel, std::move(outgoing.transfer));
      }
    }
    sendQueue_.clear();
    for (auto& [key, transfers] : awaitingRead_) {
      for (auto& transfer : transfers) {
        pending.emplace_back(std::get<0>(key), std::move(transfer));
      }
    }
    awaitingRead_.clear();
    for (auto& [key, transfer] : awaitingResend_) {
      pending.emplace_back(std::get<0>(key), std::move(transfer));
    }
    awaitingResend_.clear();
  }
  for (const auto& path : paths_) {
    path->linkFailed(reason); // its reads in flight end (and see failed_)
  }
  // The groups fail first: a group that had already failed for another
  // reason (a notice that came in before the link went) keeps that reason,
  // and its pending transfers on this link report it, not this link.
  if (departed) {
    channels_->peerDeparted(this);
  } else {
    channels_->peerFailed(this, reason);
  }
  for (auto& [channel, transfer] : pending) {
    transfer->complete(lossOf(channel, transfer->peerRank, reason), -1);
  }
}

void Connection::addCounters(std::map<std::string, uint64_t>& into) const {
  for (const auto& path : paths_) {
    path->addCounters(into);
  }
}

void Connection::closeGracefully(Deadline deadline) {
  if (failed_) {
    return;
  }
  {
    std::lock_guard<std::mutex> guard(sendMutex_);
    FrameHeader goodbye = makeControlHeader(FrameKind::kGoodbye, 0, 0, 0);
    sendQueue_.push_back(Outgoing{goodbye, nullptr, 0, nullptr, {}});
    while (!sendQueue_.empty() && sendError_.empty() && Clock::now() < deadline) {
      for (auto& transfer : flushLocked()) {
        transfer->complete({}, transfer->peerRank);
      }
      if (!sendQueue_.empty() && sendError_.empty()) {
        pollFor(socket_.fd(), POLLOUT, deadline);
      }
    }
  }
  ::shutdown(socket_.fd(), SHUT_WR);
}

} // namespace monarch
