#include "transport/remote_read/remote_read_path.h"

#include "transport/remote_read/cross_memory.h"

namespace monarch {

bool RemoteReadPath::send(PathLink& link, const FrameHeader& header, const TransferPtr& transfer) {
  if (!sends_ || transfer->bytes < minBytes_) {
    return false;
  }
  announce(link, header, RemoteRegion{reinterpret_cast<uint64_t>(transfer->data), transfer->bytes}, transfer);
  return true;
}

size_t RemoteReadPath::descriptorBytes() const {
  return sizeof(RemoteRegion);
}

uint64_t RemoteReadPath::announcedBytes(const char* descriptor) const {
  return regionOf<RemoteRegion>(descriptor).bytes;
}

void RemoteReadPath::read(const char* descriptor, const TransferPtr& target, int rank, ReadDone done) {
  const auto region = regionOf<RemoteRegion>(descriptor);
  std::string error;
  if (!readRemote(static_cast<pid_t>(peerPid_), region, target->data, &error)) {
    // The peer is gone or the kernel refuses: nothing to take over TCP.
    done(Status::error(ErrorKind::kPeerFailure, {rank}, "reading from rank " + std::to_string(rank) + " failed: " + error),
         /*resendInline=*/false);
    return;
  }
  bytesRead_ += region.bytes;
  done({}, false);
}

void RemoteReadPath::addCounters(std::map<std::string, uint64_t>& into) const {
  into[kReadCounter] += bytesRead_.load();
}

} // namespace monarch
