#include "transport/wire.h"

#include "transport/host_identity.h"

#include <unistd.h>

#include <cstddef>
#include <cstring>
#include <sstream>

namespace monarch {

const char* opCodeName(OpCode op) {
  switch (op) {
    case OpCode::kBroadcast:
      return "broadcast";
    case OpCode::kAllreduce:
      return "allreduce";
    case OpCode::kReduce:
      return "reduce";
    case OpCode::kAllgather:
      return "allgather";
    case OpCode::kGather:
      return "gather";
    case OpCode::kScatter:
      return "scatter";
    case OpCode::kReduceScatter:
      return "reduce_scatter";
    case OpCode::kAlltoall:
      return "alltoall";
    case OpCode::kBarrier:
      return "barrier";
    case OpCode::kPointToPoint:
      return "send/recv";
    case OpCode::kSparseAllreduce:
      return "sparse allreduce";
  }
  return "unknown op";
}

std::string OpSignature::describe() const {
  std::ostringstream out;
  out << opCodeName(op) << "(dtype=" << dataTypeName(dtype) << ", count=" << count;
  if (root >= 0) {
    out << ", root=" << root;
  }
  if (reduceOp != kNoReduceOp) {
    static const char* const kNames[] = {
        "SUM", "AVG", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR", "PREMUL_SUM"};
    out << ", op=" << (reduceOp < 9 ? kNames[reduceOp] : "invalid");
  }
  out << ")";
  return out.str();
}

uint64_t fnv1a64(const void* data, size_t bytes, uint64_t seed) {
  const auto* p = static_cast<const uint8_t*>(data);
  uint64_t hash = seed;
  for (size_t i = 0; i < bytes; ++i) {
    hash ^= p[i];
    hash *= 1099511628211ull;
  }
  return hash;
}

uint32_t headerChecksum(const FrameHeader& header) {
  uint64_t hash = fnv1a64(&header, offsetof(FrameHeader, checksum));
  return static_cast<uint32_t>(hash ^ (hash >> 32));
}

namespace {

FrameHeader blankHeader(FrameKind kind, uint64_t channel, uint64_t seq, uint64_t payloadBytes) {
  FrameHeader header;
  std::memset(&header, 0, sizeof(header));
  header.magic = kMagic;
  header.kind = static_cast<uint8_t>(kind);
  header.channel = channel;
  header.seq = seq;
  header.root = -1;
  header.payloadBytes = payloadBytes;
  return header;
}

} // namespace

FrameHeader makeDataHeader(
    uint64_t channel, uint64_t seq, uint32_t step, const OpSignature& sig,
    uint64_t payloadBytes, bool pointToPoint) {
  FrameHeader header = blankHeader(FrameKind::kData, channel, seq, payloadBytes);
  header.op = static_cast<uint8_t>(sig.op);
  header.dtype = static_cast<uint8_t>(sig.dtype);
  header.flags = pointToPoint ? kFramePointToPoint : 0;
  header.step = step;
  header.root = sig.root;
  header.reduceOp = sig.reduceOp;
  header.count = sig.count;
  header.checksum = headerChecksum(header);
  return header;
}

FrameHeader makeSignatureHeader(uint64_t channel, uint64_t seq, const OpSignature& sig) {
  FrameHeader header = makeDataHeader(channel, seq, 0, sig, 0, false);
  header.flags = kFrameSignatureOnly;
  header.checksum = headerChecksum(header);
  return header;
}

FrameHeader makeControlHeader(FrameKind kind, uint64_t channel, uint64_t seq, uint64_t payloadBytes) {
  FrameHeader header = blankHeader(kind, channel, seq, payloadBytes);
  header.checksum = headerChecksum(header);
  return header;
}

FrameHeader makePathControlHeader(FrameKind kind, uint8_t pathFlag, uint64_t payloadBytes) {
  FrameHeader header = blankHeader(kind, 0, 0, payloadBytes);
  header.flags = pathFlag;
  header.checksum = headerChecksum(header);
  return header;
}

Status validateHeader(const FrameHeader& header) {
  auto corrupt = [](const std::string& why) {
    return Status::error(ErrorKind::kProtocol, {}, "corrupt frame: " + why);
  };
  if (header.magic != kMagic) {
    return corrupt("bad magic");
  }
  if (header.checksum != headerChecksum(header)) {
    return corrupt("header checksum mismatch");
  }
  switch (static_cast<FrameKind>(header.kind)) {
    case FrameKind::kData:
      if (header.payloadBytes > kMaxFramePayload) {
        return corrupt("payload length out of range");
      }
      if ((header.flags & kFramePathMask) & ((header.flags & kFramePathMask) - 1)) {
        return corrupt("two payload paths at once");
      }
      // The link checks the exact length against the path's descriptor.
      if ((header.flags & kFramePathMask) && header.payloadBytes > kMaxPathDescriptor) {
        return corrupt("payload path descriptor too long");
      }
      if ((header.flags & kFrameSignatureOnly) &&
          (header.payloadBytes != 0 || (header.flags & (kFramePathMask | kFramePointToPoint)))) {
        return corrupt("signature-only frame with a payload");
      }
      if (header.dtype >= static_cast<uint8_t>(DataType::kCount)) {
        return corrupt("unknown dtype");
      }
      if (header.op < static_cast<uint8_t>(OpCode::kBroadcast) ||
          header.op > static_cast<uint8_t>(OpCode::kSparseAllreduce)) {
        return corrupt("unknown op");
      }
      return {};
    case FrameKind::kErrorNotice:
      if (header.payloadBytes > kMaxNoticePayload) {
        return corrupt("error notice too long");
      }
      return {};
    case FrameKind::kPathAddress:
      if (header.payloadBytes == 0 || header.payloadBytes > kMaxPathAddress) {
        return corrupt("payload path address length out of range");
      }
      return {};
    case FrameKind::kHeartbeat:
    case FrameKind::kGoodbye:
    case FrameKind::kProgressQuery:
    case FrameKind::kProgressReply:
    case FrameKind::kReadDone:
    case FrameKind::kPathReady:
      if (header.payloadBytes != 0) {
        return corrupt("control frame with payload");
      }
      return {};
  }
  return corrupt("unknown frame kind");
}

Status checkFrameMatches(
    const FrameHeader& header, uint64_t dataBytes, const OpSignature& expected, uint64_t expectedBytes, int peerRank,
    uint64_t seq) {
  OpSignature got = signatureFrom(header);
  if (got != expected || dataBytes != expectedBytes) {
    std::string theirs = "called " + got.describe();
    if (got == expected) {
      theirs += " with a different size (" + std::to_string(dataBytes) + " bytes, expected " +
          std::to_string(expectedBytes) + ")";
    }
    return mismatchStatus(seq, expected, peerRank, theirs);
  }
  return {};
}

Status mismatchStatus(uint64_t seq, const OpSignature& mine, int peer, const std::string& theirs) {
  return Status::error(
      ErrorKind::kMismatch, {peer},
      "collective mismatch at sequence number " + std::to_string(seq) + ": this rank called " + mine.describe() +
          " but rank " + std::to_string(peer) + " " + theirs);
}

std::string encodeNotice(const Status& status) {
  std::string out;
  out.push_back(static_cast<char>(status.kind));
  uint32_t nranks = static_cast<uint32_t>(status.ranks.size());
  out.append(reinterpret_cast<const char*>(&nranks), sizeof(nranks));
  for (int r : status.ranks) {
    int32_t rank = r;
    out.append(reinterpret_cast<const char*>(&rank), sizeof(rank));
  }
  size_t room = kMaxNoticePayload - out.size();
  out.append(status.message.substr(0, room));
  return out;
}

Status decodeNotice(const std::string& payload) {
  auto corrupt = Status::error(ErrorKind::kProtocol, {}, "corrupt error notice");
  if (payload.size() < 1 + sizeof(uint32_t)) {
    return corrupt;
  }
  if (!isFailureKind(static_cast<uint8_t>(payload[0]))) {
    return corrupt;
  }
  auto kind = static_cast<ErrorKind>(payload[0]);
  uint32_t nranks;
  std::memcpy(&nranks, payload.data() + 1, sizeof(nranks));
  size_t offset = 1 + sizeof(nranks);
  if (nranks > (payload.size() - offset) / sizeof(int32_t)) {
    return corrupt;
  }
  std::vector<int> ranks(nranks);
  for (uint32_t i = 0; i < nranks; ++i) {
    int32_t rank;
    std::memcpy(&rank, payload.data() + offset, sizeof(rank));
    ranks[i] = rank;
    offset += sizeof(rank);
  }
  return Status::error(kind, std::move(ranks), payload.substr(offset));
}

Handshake makeHandshake(
    const uint8_t* token, uint64_t groupHash, uint32_t epoch, int rank, int worldSize, uint64_t endpointId,
    uint64_t hostId) {
  Handshake hs;
  std::memset(&hs, 0, sizeof(hs));
  hs.magic = kMagic;
  hs.version = kProtocolVersion;
  std::memcpy(hs.token, token, kTokenBytes);
  hs.groupHash = groupHash;
  hs.epoch = epoch;
  hs.rank = rank;
  hs.worldSize = worldSize;
  hs.pid = static_cast<uint32_t>(getpid());
  hs.endpointId = endpointId;
  hs.hostId = hostId;
  hs.probeAddress = probeWordAddress();
  return hs;
}

Status validateHandshake(
    const Handshake& hs, const uint8_t* token, uint64_t groupHash, uint32_t epoch, int worldSize) {
  auto reject = [](const std::string& why) {
    return Status::error(ErrorKind::kProtocol, {}, "handshake rejected: " + why);
  };
  if (hs.magic != kMagic) {
    return reject("bad magic (not a monarch peer)");
  }
  if (hs.version != kProtocolVersion) {
    return reject("protocol version " + std::to_string(hs.version) + ", expected " +
                  std::to_string(kProtocolVersion));
  }
  if (std::memcmp(hs.token, token, kTokenBytes) != 0) {
    return reject("wrong job token (peer belongs to another job)");
  }
  if (hs.groupHash != groupHash || hs.epoch != epoch) {
    return reject("peer belongs to another group or epoch");
  }
  if (hs.worldSize != worldSize || hs.rank < 0 || hs.rank >= worldSize) {
    return reject("rank " + std::to_string(hs.rank) + " of world " + std::to_string(hs.worldSize) +
                  " does not fit world size " + std::to_string(worldSize));
  }
  return {};
}

} // namespace monarch
