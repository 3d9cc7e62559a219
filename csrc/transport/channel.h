#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <set>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "transport/socket.h"
#include "transport/transfer.h"

namespace monarch {

class Connection;

// The mailbox of one group on a shared set of connections: matches incoming
// data frames to posted receives by (peer, sequence number, step) or, for
// point-to-point, by (peer, tag) in order. Frames that arrive before their
// receive is posted are kept until it is.
class Channel {
 public:
  explicit Channel(uint64_t id) : id_(id) {}

  uint64_t id() const {
    return id_;
  }

  // Tells the channel which group rank each connection serves (null for
  // this rank), in place of what it was told before.
  void bindPeers(const std::vector<std::shared_ptr<Connection>>& connectionByRank);
  int rankOf(Connection* connection);

  // Worker side. `from` is null for a receive from any source.
  void postRecv(Connection* from, const TransferPtr& transfer);

  // I/O side, once a data frame header has been read. Returns the posted
  // receive the frame completes (removed from the mailbox), or null when none
  // is posted yet.
  TransferPtr claimPosted(Connection* from, const FrameHeader& header);
  // I/O side, once a frame that had no posted receive has been read whole.
  void deliverUnexpected(Connection* from, const FrameHeader& header, std::unique_ptr<char[]> payload);

  // Worker side: collective `seq`, run as `signature`, is over. Every message
  // of a collective has its receive in the same op on the peer, so a
  // collective frame for this op or an earlier one that is unclaimed now, or
  // arrives later, was sent by a peer that ran a different op (say, with
  // another root): a mismatch, which breaks the group.
  void finishOp(uint64_t seq, const OpSignature& signature);

  // The group is broken: completes every posted receive with `status`, and
  // fails every later one at once. With `tellPeers`, the first failure is
  // sent to every peer as an error notice, so that all ranks learn of a
  // failure that only this one saw.
  void fail(const Status& status, bool tellPeers);
  // A peer's connection broke.
  void peerFailed(Connection* connection, const std::string& reason);
  // This rank leaves the group in order, for another membership: fails it
  // here as fail() does, and tells every peer the last collective it
  // finished (the error notice's seq), so that a peer still in that op may
  // finish it (peerLeft()).
  void leave(const Status& status);
  // A peer shut down in order: what it sent can still be received, but
  // nothing more will come from it.
  void peerDeparted(Connection* connection);
  // A peer left the group in order after finishing collective `lastSeq`.
  // Like peerDeparted(): what it sent can still be received (it came before
  // the notice, on the same link), nothing more will. The group fails with
  // `status` once this rank is past op `lastSeq`: at once if it already is,
  // else when it finishes that op or starts a later one.
  void peerLeft(Connection* connection, uint64_t lastSeq, const Status& status);
  // Worker side: this rank starts collective `seq` as `signature`. Every
  // collective frame carries its op's signature, and each is compared with
  // this rank's as soon as both are known, claimed or not (a signature-only
  // frame is never claimed): frames already here for `seq` now, later ones
  // on arrival. A frame of another signature breaks the group (a mismatch).
  void startOp(uint64_t seq, const OpSignature& signature);
  uint64_t progress() const {
    return progress_;
  }
  // Asks every peer which op it has reached. Returns the ranks that have not
  // started op `seq`, counting those that do not answer by `deadline`.
  std::vector<int> ranksBehind(uint64_t seq, Deadline deadline);
  void onProgressReply(Connection* from, uint64_t seq);

  // Waiters on this group's transfers, woken when the channel fails.
  void setSignal(const std::shared_ptr<CompletionSignal>& signal);
  bool broken() const {
    return broken_.load();
  }

  // True once the group is broken; fills `status` with why.
  bool errored(Status* status);
  // True once the group is broken or the peer on `to` has left it (nothing
  // sent to it would be received); fills `status` with why.
  bool refusesSendTo(Connection* to, Status* status);

 private:
  struct Key {
    Connection* from;
    bool pointToPoint;
    uint64_t seq;
    uint32_t step;
    bool operator<(const Key& other) const {
      return std::tie(from, pointToPoint, seq, step) <
          std::tie(other.from, other.pointToPoint, other.seq, other.step);
    }
  };
  struct Unexpected {
    FrameHeader header;
    std::unique_ptr<char[]> payload; // header.payloadBytes long
  };

  static Status departedStatus(int rank);
  // fail(); `leaving`: the notice carries the last collective this rank
  // finished, as leave() tells it.
  void failAndTell(const Status& status, bool tellPeers, bool leaving);
  // Marks the peer on `connection` gone with `why` and returns its posted
  // receives, which nothing will complete now.
  std::vector<TransferPtr> departLocked(Connection* connection, const Status& why);
  // A mismatch if this rank has started op header.seq under a signature
  // other than the frame's; ok when they agree or the op is not known.
  Status checkSignatureLocked(Connection* from, const FrameHeader& header);
  Status strayFrameLocked(Connection* from, const FrameHeader& header);
  static Key keyOf(Connection* from, const FrameHeader& header);
  TransferPtr claimPostedLocked(Connection* from, const FrameHeader& header);
  static Key keyOf(Connection* from, const Transfer& transfer);
  // Copies a buffered frame into a receive and completes it.
  void fulfil(const TransferPtr& transfer, Connection* from, Unexpected& message);

  const uint64_t id_;
  std::atomic<uint64_t> progress_{0};
  std::atomic<bool> broken_{false};
  std::weak_ptr<CompletionSignal> signal_;
  std::mutex mutex_;
  std::condition_variable repliesChanged_;
  std::map<int, uint64_t> progressReplies_;
  std::unordered_map<Connection*, int> rankByConnection_;
  std::vector<std::shared_ptr<Connection>> peers_;
  std::map<Key, std::deque<TransferPtr>> posted_;
  std::map<uint64_t, std::deque<TransferPtr>> postedAnySource_; // by tag
  std::map<Key, std::deque<Unexpected>> unexpected_;
  Status error_;
  std::map<Connection*, Status> departed_; // peers that send no more, and why
  // The failure that a peer which left after op leftAfter_ deferred
  // (peerLeft()); leftAfter_ is 0 while there is none.
  uint64_t leftAfter_ = 0;
  Status leftStatus_;
  uint64_t finishedSeq_ = 0; // the last collective this rank finished
  OpSignature finishedSignature_;
  // The signatures of the last kSignatureHistory collectives this rank
  // started, by sequence number: a peer's signature-only frame may arrive
  // long after this rank finished the op (nobody waits for it).
  static constexpr size_t kSignatureHistory = 1024;
  std::map<uint64_t, OpSignature> started_;
  // Signature-only frames of ops this rank has not started yet.
  std::vector<std::pair<Connection*, FrameHeader>> earlySignatures_;
};

} // namespace monarch
