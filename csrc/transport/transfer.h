#pragma once

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>

#include "common/status.h"
#include "transport/wire.h"

namespace monarch {

// Wakes the threads waiting on a group's transfers. One per group: every
// transfer of the group notifies it, and abort() notifies it too.
struct CompletionSignal {
  std::mutex mutex;
  std::condition_variable cv;
};

// One posted send or receive of a buffer region to or from one peer.
struct Transfer {
  enum class Direction { kSend, kRecv };

  Direction direction = Direction::kSend;
  bool pointToPoint = false;
  uint64_t seq = 0; // collective sequence number or point-to-point tag
  uint32_t step = 0;
  OpSignature signature;
  void* data = nullptr;
  size_t bytes = 0;
  int peerRank = -1; // group rank of the peer; -1 receives from any source
  std::shared_ptr<void> keepalive; // keeps `data` alive while the link uses it
  std::shared_ptr<CompletionSignal> signal;
  // Runs once, after completion, on whichever thread completed the transfer.
  std::function<void(const Status&, int sourceRank)> onComplete;

  // Guarded by signal->mutex.
  bool done = false;
  Status status;
  int sourceRank = -1;

  // First completion wins; later calls are ignored.
  void complete(Status result, int fromRank);
  bool isDone();
};

using TransferPtr = std::shared_ptr<Transfer>;

} // namespace monarch
