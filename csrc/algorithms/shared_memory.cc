// The shared-memory broadcast, in rounds. In a round the root writes its
// piece into its region, all ranks meet, then the others read the piece. In
// the first round they meet as they agree on the op's signature
// (shared_signature.h: no data frame moves, so none carries it), later
// rounds at a barrier in shared memory. A round uses one half of the root's
// region and the next round the other half: the root writes half h again
// two rounds later, after the meeting of the round between, which no rank
// passes before it has finished reading the previous round (a rank agrees
// on an op only once it has finished the ops before). One meeting per round
// is therefore enough, and SharedRegions::rounds carries the alternation
// from one op to the next.

#include "algorithms/shared_memory.h"
#include "algorithms/shared_signature.h"

#include <algorithm>

#include "algorithms/parallel.h"
#include "algorithms/shared_slots.h"

namespace monarch {

bool sharedBroadcast(Links& links, void* data, size_t bytes, int root, const AlgorithmConfig& config) {
  SharedRegions* regions = regionsFor(links, bytes, config);
  if (!regions) {
    return false;
  }
  const size_t piece = slotBytes(*regions);
  auto* buffer = static_cast<char*>(data);
  const bool isRoot = links.rank() == root;
  // An empty broadcast still agrees on the op, in a round that moves nothing.
  size_t begin = 0;
  do {
    const size_t length = std::min(piece, bytes - begin);
    if (isRoot) {
      copySpans({{slotOf(*regions, root), buffer + begin, length}}, config.helpers);
    }
    meetForRound(links, *regions, begin == 0);
    if (!isRoot) {
      copySpans({{buffer + begin, slotOf(*regions, root), length}}, config.helpers);
    }
    begin += length;
    ++regions->rounds;
  } while (begin < bytes);
  return true;
}

} // namespace monarch
