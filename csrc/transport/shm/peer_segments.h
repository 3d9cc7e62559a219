#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "transport/links.h"
#include "transport/shm/segment.h"

namespace monarch {

// The shared regions of a group's ranks on one host: this rank's segment
// and a mapping of every other's. Each segment starts with a header
// holding its owner's barrier count and published tiles (and, in the first
// rank's, the group's tile claims and reductions), then the region.
class PeerSegments : public SharedRegions {
 public:
  // Who created rank i's segment.
  struct Owner {
    pid_t pid;
    uint64_t endpointId;
  };
  // Called while a barrier waits for `rank` (-1: for no rank in
  // particular); throws OpFailure when the group has broken or aborted or
  // the op's deadline has passed.
  using WaitCheck = std::function<void(int rank)>;

  // Sets the segments up with the peers inside the current op of `links`:
  // every rank creates its own, they agree that all did, map each other's,
  // agree again, and unlink the names. Returns null on every rank when any
  // rank failed (logged; the group keeps using its links). Throws OpFailure,
  // like any transfer, when a peer fails meanwhile; the names are unlinked
  // then too.
  static std::unique_ptr<PeerSegments> setUp(
      Links& links, const std::vector<Owner>& ownerByRank, uint64_t channelId, size_t bytesPerRegion,
      WaitCheck checkWhileWaiting);

  size_t bytesPerRegion() const override {
    return bytesPerRegion_;
  }
  char* region(int rank) const override;
  void barrier() override;
  std::atomic<uint64_t>& published(int rank, size_t tile) const override;
  std::atomic<uint64_t>& claimed(size_t tile) const override;
  std::atomic<uint64_t>& reduced(size_t tile) const override;
  void store(std::atomic<uint64_t>& word, uint64_t value) override;
  uint64_t await(
      const std::atomic<uint64_t>& word,
      const std::function<bool(uint64_t)>& ready,
      const std::function<int(uint64_t)>& waitedOn) override;
  char* poolBlock(int rank, const PoolSpan& span) override;

 private:
  PeerSegments(int rank, size_t bytesPerRegion, WaitCheck check)
      : rank_(rank), bytesPerRegion_(bytesPerRegion), checkWhileWaiting_(std::move(check)) {}
  void awaitArrival(int rank, uint32_t count);

  const int rank_;
  const size_t bytesPerRegion_;
  const WaitCheck checkWhileWaiting_;
  std::vector<std::unique_ptr<SharedSegment>> segments_; // by rank
  // The peers' pool blocks mapped so far, by (rank, block): a block number
  // is never reused, so a mapping stays right for the group's life.
  std::map<std::pair<int, uint64_t>, std::unique_ptr<SharedSegment>> poolBlocks_;
  uint32_t barriers_ = 0; // barriers this rank has entered (wraps)
};

} // namespace monarch
