#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "algorithms/links.h"
#include "transport/shm/segment.h"

namespace monarch {

// The shared regions of a group whose ranks all run on one host: this
// rank's segment, and a mapping of every peer's.
class PeerSegments {
 public:
  // Who created rank i's segment.
  struct Owner {
    pid_t pid;
    uint64_t endpointId;
  };

  // Sets the segments up with the peers inside the current op of `links`:
  // every rank creates its own, they agree that all did, map each other's,
  // agree again, and unlink the names. Returns null on every rank when any
  // rank failed (logged; the group keeps using its links). Throws OpFailure,
  // like any transfer, when a peer fails meanwhile; the names are unlinked
  // then too.
  static std::unique_ptr<PeerSegments> setUp(
      Links& links, const std::vector<Owner>& ownerByRank, uint64_t channelId, size_t bytesPerRegion);

  SharedRegions& regions() {
    return regions_;
  }

 private:
  std::vector<std::unique_ptr<SharedSegment>> segments_; // by rank
  SharedRegions regions_;
};

} // namespace monarch
