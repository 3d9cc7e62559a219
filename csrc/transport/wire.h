#pragma once

// Byte layouts that cross a link. Everything is host byte order: a job runs on
// hosts of one architecture, as with Gloo and NCCL.

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/dtype.h"
#include "common/status.h"

namespace monarch {

constexpr uint32_t kMagic = 0x4352'4e4d; // "MNRC"
constexpr uint16_t kProtocolVersion = 1;
constexpr size_t kTokenBytes = 16;

// First bytes on every new link, in both directions.
struct Handshake {
  uint32_t magic;
  uint16_t version;
  uint16_t reserved;
  uint8_t token[kTokenBytes]; // job token taken from the rendezvous store
  uint64_t groupHash; // which group rendezvous this link belongs to
  uint32_t epoch;
  int32_t rank; // sender's rank in that group
  int32_t worldSize;
  uint32_t pid; // OS process id, for logs and same-host remote reads
  uint64_t endpointId; // identifies the sending Fabric across groups
  uint64_t hostId; // see localHostId()
  uint64_t probeAddress; // see probeWordAddress()
};
static_assert(sizeof(Handshake) == 72, "Handshake layout changed");

// The epoch of groups formed from reconfigure handles (store-formed groups
// use 0): their members dial one another by handle, so a dial may arrive
// before this end has begun to form the group, and waits for it.
constexpr uint32_t kHandleEpoch = 1;
// A handshake from this rank is a liveness probe of the endpoint (a member
// forming a group by handle asks whether this process still listens); it is
// closed without a word.
constexpr int32_t kProbeRank = -1;

// Collective or point-to-point operation a frame belongs to.
enum class OpCode : uint8_t {
  kBroadcast = 1,
  kAllreduce = 2,
  kReduce = 3,
  kAllgather = 4,
  kGather = 5,
  kScatter = 6,
  kReduceScatter = 7,
  kAlltoall = 8,
  kBarrier = 9,
  kPointToPoint = 10,
  kSparseAllreduce = 11, // last: the frame check accepts op codes up to it
};

const char* opCodeName(OpCode op);

constexpr uint8_t kNoReduceOp = 0xff;

// What every participant of one op agrees on; carried in each data frame and
// compared on receipt so that ranks calling different ops fail loudly.
struct OpSignature {
  OpCode op = OpCode::kBarrier;
  DataType dtype = DataType::kUInt8;
  uint64_t count = 0; // elements of the op, as the caller passed them
  int32_t root = -1;
  uint8_t reduceOp = kNoReduceOp; // c10d's RedOpType numbering, for reducing ops

  std::string describe() const;

  bool operator==(const OpSignature& other) const {
    return op == other.op && dtype == other.dtype && count == other.count && root == other.root &&
        reduceOp == other.reduceOp;
  }
  bool operator!=(const OpSignature& other) const {
    return !(*this == other);
  }
};

// The signature a record on the wire or in shared memory (a frame header, a
// signature stamp) carries in fields of these names.
template <typename Record>
OpSignature signatureFrom(const Record& record) {
  OpSignature signature;
  signature.op = static_cast<OpCode>(record.op);
  signature.dtype = static_cast<DataType>(record.dtype);
  signature.count = record.count;
  signature.root = record.root;
  signature.reduceOp = record.reduceOp;
  return signature;
}

enum class FrameKind : uint8_t {
  kData = 1,
  // The sender's group on this channel failed; payload says why. seq > 0:
  // the sender left the group in order after finishing collective seq.
  kErrorNotice = 2,
  kHeartbeat = 3,
  kGoodbye = 4, // orderly shutdown: the sender sends nothing after this
  kProgressQuery = 5, // "which op of this channel have you reached?"
  kProgressReply = 6, // seq = the last op the sender started on the channel
  kReadDone = 7, // the receiver finished a read of (channel, seq, step) by a payload path
  // Payload paths' own control frames; the flags name the path (its bit of
  // kFramePathMask), the payload path (payload_path.h) reads them.
  kPathAddress = 8, // payload: the sender's address on that path
  kPathReady = 9, // the sender took our address: it may read what we expose
};

// Largest address a kPathAddress frame may carry.
constexpr uint64_t kMaxPathAddress = 1024;

constexpr uint8_t kFramePointToPoint = 0x1;
// The bits that name a read path (payload_paths.h says which is which): a
// data frame with one set carries that path's descriptor of the sender's
// buffer, not the data.
constexpr uint8_t kFramePathMask = 0x6;
// Largest descriptor of a read path.
constexpr uint64_t kMaxPathDescriptor = 64;
// On kReadDone: the read failed, send the payload inline over TCP instead.
constexpr uint8_t kFrameResendInline = 0x8;
// On a collective data frame: no payload, nothing to claim; it only carries
// the sender's signature of op `seq`, which the receiver checks on arrival
// (Channel) against its own. Sent by a rank that waits for data from the
// peer, so that a peer that ran another op finds out (Links::announce).
constexpr uint8_t kFrameSignatureOnly = 0x10;

struct FrameHeader {
  uint32_t magic;
  uint8_t kind;
  uint8_t op;
  uint8_t dtype;
  uint8_t flags;
  uint64_t channel; // group the frame belongs to
  uint64_t seq; // collective sequence number, or the tag for point-to-point
  uint32_t step; // index of this message between the pair within the op
  int32_t root;
  uint64_t count;
  uint64_t payloadBytes;
  uint8_t reduceOp;
  uint8_t padding[3];
  uint32_t checksum; // over all bytes before this field
};
static_assert(sizeof(FrameHeader) == 56, "FrameHeader layout changed");

// Largest payload a single frame may announce; anything above is corruption.
constexpr uint64_t kMaxFramePayload = uint64_t(1) << 40;
// Largest error notice payload.
constexpr uint64_t kMaxNoticePayload = 64 * 1024;

uint32_t headerChecksum(const FrameHeader& header);
FrameHeader makeDataHeader(
    uint64_t channel, uint64_t seq, uint32_t step, const OpSignature& sig,
    uint64_t payloadBytes, bool pointToPoint);
// A kFrameSignatureOnly data frame of op `seq`.
FrameHeader makeSignatureHeader(uint64_t channel, uint64_t seq, const OpSignature& sig);
FrameHeader makeControlHeader(FrameKind kind, uint64_t channel, uint64_t seq, uint64_t payloadBytes);
// A payload path's kPathAddress or kPathReady; `pathFlag` names the path.
FrameHeader makePathControlHeader(FrameKind kind, uint8_t pathFlag, uint64_t payloadBytes);

// Checks magic, checksum, kind and bounds of a header read off a link.
Status validateHeader(const FrameHeader& header);

// The mismatch of op `seq`: this rank called `mine`, and rank `peer` did
// what `theirs` says ("called ...", "had gone past this op ...").
Status mismatchStatus(uint64_t seq, const OpSignature& mine, int peer, const std::string& theirs);

// Checks an incoming data frame carrying `dataBytes` against what the local
// op expects.
Status checkFrameMatches(
    const FrameHeader& header, uint64_t dataBytes, const OpSignature& expected, uint64_t expectedBytes, int peerRank,
    uint64_t seq);

// Error notice payload: kind, the failed ranks and a message.
std::string encodeNotice(const Status& status);
Status decodeNotice(const std::string& payload);

Handshake makeHandshake(
    const uint8_t* token, uint64_t groupHash, uint32_t epoch, int rank, int worldSize, uint64_t endpointId,
    uint64_t hostId);
// Checks a handshake received from a peer before it may join the group.
Status validateHandshake(
    const Handshake& hs, const uint8_t* token, uint64_t groupHash, uint32_t epoch, int worldSize);

uint64_t fnv1a64(const void* data, size_t bytes, uint64_t seed = 1469598103934665603ull);

} // namespace monarch
