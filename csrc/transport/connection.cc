#include "transport/connection.h"

#include <poll.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <cerrno>
#include <cstring>
#include <new>

#include "common/logging.h"
#include "transport/event_loop.h"

namespace monarch {

namespace {

constexpr size_t kDiscardChunk = 64 * 1024;
// Data frames whose payload is a region to read rather than the data.
constexpr uint8_t kReadFlags = kFrameRemoteRead | kFrameRdmaRead;

} // namespace

Connection::Connection(
    Socket socket, PeerIdentity peer, ChannelRegistry* channels, EventLoop* loop, RdmaLink rdma,
    size_t remoteReadMinBytes)
    : socket_(std::move(socket)),
      peer_(std::move(peer)),
      channels_(channels),
      loop_(loop),
      lastReceived_(Clock::now().time_since_epoch().count()),
      lastSent_(Clock::now().time_since_epoch().count()),
      rdma_(std::move(rdma.endpoint)),
      rdmaMinBytes_(std::max<size_t>(rdma.minBytes, 1)), // an empty payload has nothing to read
      remoteReadMinBytes_(remoteReadMinBytes) {
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
  if (rdma_) {
    // The peer answers kRdmaReady once it can read what we expose.
    const std::string& address = rdma_->address();
    sendControl(makeControlHeader(FrameKind::kRdmaAddress, 0, 0, address.size()), address);
  }
}

void Connection::postSend(const FrameHeader& header, const TransferPtr& transfer) {
  const bool byRead = peer_.remoteReadable ? transfer->bytes >= remoteReadMinBytes_
                                            : rdmaPeerReads_ && transfer->bytes >= rdmaMinBytes_;
  if (byRead && !failed_ && announceForRead(header, transfer)) {
    return;
  }
  counters_.tcpSent += transfer->bytes;
  enqueue(Outgoing{header, static_cast<const char*>(transfer->data), transfer->bytes, transfer, {}});
}

bool Connection::announceForRead(const FrameHeader& header, const TransferPtr& transfer) {
  FrameHeader announce = header;
  std::string descriptor;
  if (peer_.remoteReadable) {
    RemoteRegion region{reinterpret_cast<uint64_t>(transfer->data), transfer->bytes};
    announce.flags |= kFrameRemoteRead;
    descriptor.assign(reinterpret_cast<const char*>(&region), sizeof(region));
  } else {
    rdma::Registration registration;
    std::string error;
    std::shared_ptr<void> owner = transfer->keepalive ? transfer->keepalive : std::shared_ptr<void>(transfer);
    if (!rdma_->expose(transfer->data, transfer->bytes, owner, &registration, &error)) {
      // Nothing announced yet: sending it inline is safe.
      MONARCH_LOG(kWarn) << "rdma: " << error << "; sending to " << peer_.address << " over TCP";
      ++counters_.rdmaFallbacks;
      return false;
    }
    RdmaRegion region{registration.remoteAddress, transfer->bytes, registration.key};
    announce.flags |= kFrameRdmaRead;
    descriptor.assign(reinterpret_cast<const char*>(&region), sizeof(region));
  }
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
    transfer->complete(
        Status::error(ErrorKind::kPeerFailure, {transfer->peerRank},
                      "link to rank " + std::to_string(transfer->peerRank) + " is down"),
        -1);
  }
  return true;
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
    counters_.tcpSent += transfer->bytes;
    enqueue(Outgoing{data, static_cast<const char*>(transfer->data), transfer->bytes, transfer, {}});
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

void Connection::readRemotePayload(
    const FrameHeader& header, const char* descriptor, const TransferPtr& target, int rank, Channel& channel) {
  if (header.flags & kFrameRdmaRead) {
    RdmaRegion region;
    std::memcpy(&region, descriptor, sizeof(region));
    readByRdma(header, region, target, rank, channel);
    return;
  }
  RemoteRegion region;
  std::memcpy(&region, descriptor, sizeof(region));
  Status status = completeRemoteRead(header, region, *target, rank);
  if (status.kind == ErrorKind::kMismatch) {
    channel.fail(status, /*tellPeers=*/true);
  }
  target->complete(std::move(status), rank);
}

Status Connection::completeRemoteRead(
    const FrameHeader& header, const RemoteRegion& region, const Transfer& target, int rank) {
  Status status = checkFrameMatches(header, region.bytes, target.signature, target.bytes, rank, target.seq);
  std::string error;
  if (status.ok() && !readRemote(static_cast<pid_t>(peer_.pid), region, target.data, &error)) {
    status = Status::error(ErrorKind::kPeerFailure, {rank}, "reading from rank " + std::to_string(rank) + " failed: " + error);
  }
  if (status.ok()) {
    counters_.remoteRead += region.bytes;
  }
  // Acknowledged whatever happened: the sender's buffer is no longer needed.
  sendReadDone(header, false);
  return status;
}

void Connection::readByRdma(
    const FrameHeader& header, const RdmaRegion& region, const TransferPtr& target, int rank, Channel& channel) {
  Status status = checkFrameMatches(header, region.bytes, target->signature, target->bytes, rank, target->seq);
  if (status.ok() && (!rdma_ || rdmaPeer_.load() == rdma::kNoPeer)) {
    status = Status::error(
        ErrorKind::kProtocol, {rank},
        "rank " + std::to_string(rank) + " announced an rdma read before this link exchanged rdma addresses");
  }
  if (!status.ok()) {
    sendReadDone(header, false);
    if (status.kind == ErrorKind::kMismatch) {
      channel.fail(status, /*tellPeers=*/true);
    }
    target->complete(std::move(status), rank);
    return;
  }
  std::shared_ptr<void> owner = target->keepalive ? target->keepalive : std::shared_ptr<void>(target);
  auto self = shared_from_this();
  rdma_->read(
      rdmaPeer_.load(), target->data, region.bytes, region.address, region.key, std::move(owner), this,
      [self, header, target, rank, bytes = region.bytes](const std::string& error) {
        if (error.empty()) {
          self->counters_.rdmaRead += bytes;
          self->sendReadDone(header, false);
          target->complete({}, rank);
          return;
        }
        {
          std::lock_guard<std::mutex> guard(self->sendMutex_);
          if (!self->failed_) {
            // The link still works: take the payload over it instead.
            self->awaitingResend_[readKeyOf(header)] = target;
          }
        }
        if (self->failed_) {
          target->complete(
              Status::error(ErrorKind::kPeerFailure, {rank},
                            "rdma read from rank " + std::to_string(rank) + " failed: " + error),
              -1);
          return;
        }
        MONARCH_LOG(kWarn) << "rdma read from rank " << rank << " failed (" << error << "); taking it over TCP";
        ++self->counters_.rdmaFallbacks;
        self->sendReadDone(header, /*resendInline=*/true);
      });
}

void Connection::onRdmaAddress(const std::string& address) {
  if (!rdma_) {
    return; // a peer on this host, or no RDMA here: payloads stay on TCP
  }
  rdma::PeerAddress peer = rdma::kNoPeer;
  std::string error;
  if (!rdma_->addPeer(address, &peer, &error)) {
    MONARCH_LOG(kWarn) << "rdma address of " << peer_.address << " (pid " << peer_.pid << ") rejected: " << error
                       << "; its payloads to this process go over TCP";
    return;
  }
  rdmaPeer_ = peer;
  sendControl(makeControlHeader(FrameKind::kRdmaReady, 0, 0, 0), {});
}

void Connection::sendControl(const FrameHeader& header, std::string payload) {
  // enqueue() points `data` at the payload once it sits in the queue.
  enqueue(Outgoing{header, nullptr, payload.size(), nullptr, std::move(payload)});
}

void Connection::enqueue(Outgoing outgoing) {
  std::vector<TransferPtr> finished;
  std::string error;
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
        finished = flushLocked(&error);
      }
    }
  }
  if (failed_ && outgoing.transfer) {
    outgoing.transfer->complete(
        Status::error(ErrorKind::kPeerFailure, {outgoing.transfer->peerRank},
                      "link to rank " + std::to_string(outgoing.transfer->peerRank) + " is down"),
        -1);
  }
  for (auto& transfer : finished) {
    transfer->complete({}, transfer->peerRank);
  }
  if (!error.empty()) {
    fail(error);
  }
}

std::vector<TransferPtr> Connection::flushLocked(std::string* error) {
  std::vector<TransferPtr> finished;
  while (!sendQueue_.empty()) {
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
      *error = std::string("send failed: ") + std::strerror(errno);
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
  std::string error;
  if (events & EPOLLOUT) {
    std::vector<TransferPtr> finished;
    {
      std::lock_guard<std::mutex> guard(sendMutex_);
      finished = flushLocked(&error);
    }
    for (auto& transfer : finished) {
      transfer->complete({}, transfer->peerRank);
    }
  }
  if (error.empty() && (events & (EPOLLIN | EPOLLHUP | EPOLLERR))) {
    readAvailable(&error);
  }
  if (!error.empty() || failed_) {
    // Runs on the loop thread: the frame being received can be failed too.
    if (rxTarget_) {
      rxTarget_->complete(
          Status::error(ErrorKind::kPeerFailure, {rxTarget_->peerRank}, "link broke mid-frame: " + error), -1);
      rxTarget_.reset();
    }
    loop_->remove(socket_.fd());
    fail(error.empty() ? "link closed" : error);
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
    } else if (rxHeader_.kind == static_cast<uint8_t>(FrameKind::kData) && (rxHeader_.flags & kReadFlags)) {
      dest = rxDescriptor_ + rxHave_; // validateHeader bounded its size
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
  rxState_ = RxState::kPayload;
  rxHave_ = 0;
  auto kind = static_cast<FrameKind>(rxHeader_.kind);
  if (kind == FrameKind::kGoodbye) {
    peerSaidGoodbye_ = true;
  }
  bool perChannel = kind != FrameKind::kHeartbeat && kind != FrameKind::kGoodbye && kind != FrameKind::kReadDone &&
      kind != FrameKind::kRdmaAddress && kind != FrameKind::kRdmaReady;
  rxChannel_ = perChannel ? channels_->forIncoming(rxHeader_.channel) : nullptr;
  rxTarget_.reset();
  rxTargetStatus_ = Status();
  if (kind == FrameKind::kData && rxChannel_) {
    if (!(rxHeader_.flags & kReadFlags)) {
      std::lock_guard<std::mutex> guard(sendMutex_);
      auto resent = awaitingResend_.find(readKeyOf(rxHeader_));
      if (resent != awaitingResend_.end()) {
        rxTarget_ = std::move(resent->second); // the payload of an rdma read that failed
        awaitingResend_.erase(resent);
      }
    }
    if (!rxTarget_) {
      rxTarget_ = rxChannel_->claimPosted(this, rxHeader_);
    }
    // A remote read is checked once its region has arrived.
    if (rxTarget_ && !(rxHeader_.flags & kReadFlags)) {
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
  bool keepPayload = (rxChannel_ && !rxTarget_ && !(rxHeader_.flags & kReadFlags)) || kind == FrameKind::kRdmaAddress;
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
  const bool remote = kind == FrameKind::kData && (rxHeader_.flags & kReadFlags);
  if (remote && rxTarget_) {
    readRemotePayload(rxHeader_, rxDescriptor_, rxTarget_, rxChannel_->rankOf(this), *rxChannel_);
  } else if (remote && rxChannel_) {
    std::unique_ptr<char[]> descriptor(new char[rxHeader_.payloadBytes]);
    std::memcpy(descriptor.get(), rxDescriptor_, rxHeader_.payloadBytes);
    rxChannel_->deliverUnexpected(this, rxHeader_, std::move(descriptor));
  } else if (remote) {
    sendReadDone(rxHeader_, false); // the group is gone; still release the sender's buffer
  } else if (kind == FrameKind::kRdmaAddress) {
    onRdmaAddress(std::string(rxBuffer_.get(), rxHeader_.payloadBytes));
  } else if (kind == FrameKind::kRdmaReady) {
    rdmaPeerReads_ = rdma_ != nullptr;
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
    rxChannel_->fail(notice, /*tellPeers=*/false);
  }
  rxState_ = RxState::kHeader;
  rxHave_ = 0;
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
  std::vector<TransferPtr> pending;
  {
    std::lock_guard<std::mutex> guard(sendMutex_);
    for (auto& outgoing : sendQueue_) {
      if (outgoing.transfer) {
        pending.push_back(std::move(outgoing.transfer));
      }
    }
    sendQueue_.clear();
    for (auto& entry : awaitingRead_) {
      pending.insert(pending.end(), entry.second.begin(), entry.second.end());
    }
    awaitingRead_.clear();
    for (auto& entry : awaitingResend_) {
      pending.push_back(std::move(entry.second));
    }
    awaitingResend_.clear();
  }
  if (rdma_) {
    // Completes this link's reads in flight (the callbacks see failed_).
    rdma_->cancelReads(this, "link failed: " + reason);
  }
  for (auto& transfer : pending) {
    int rank = transfer->peerRank;
    transfer->complete(
        Status::error(ErrorKind::kPeerFailure, {rank}, "lost rank " + std::to_string(rank) + ": " + reason), -1);
  }
  if (departed) {
    channels_->peerDeparted(this);
  } else {
    channels_->peerFailed(this, reason);
  }
}

void Connection::closeGracefully(Deadline deadline) {
  if (failed_) {
    return;
  }
  std::string error;
  {
    std::lock_guard<std::mutex> guard(sendMutex_);
    FrameHeader goodbye = makeControlHeader(FrameKind::kGoodbye, 0, 0, 0);
    sendQueue_.push_back(Outgoing{goodbye, nullptr, 0, nullptr, {}});
    while (!sendQueue_.empty() && error.empty() && Clock::now() < deadline) {
      for (auto& transfer : flushLocked(&error)) {
        transfer->complete({}, transfer->peerRank);
      }
      if (!sendQueue_.empty() && error.empty()) {
        pollFor(socket_.fd(), POLLOUT, deadline);
      }
    }
  }
  ::shutdown(socket_.fd(), SHUT_WR);
}

} // namespace monarch
