// The shared-memory broadcast, in rounds. In a round the root writes its
// piece into its region, all ranks meet at a barrier in shared memory, then
// the others read the piece. A round uses one half of the root's region and
// the next round the other half: the root writes half h again two rounds
// later, after the barrier of the round between, which no rank passes
// before it has finished reading the previous round. One barrier per round
// is therefore enough, and SharedRegions::rounds carries the alternation
// from one op to the next. No data frame moves, so the ranks compare the
// op's signature through shared memory first (shared_signature.h).

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
  agreeThroughSharedMemory(links, *regions);
  for (size_t begin = 0; begin < bytes; begin += piece, ++regions->rounds) {
    size_t length = std::min(piece, bytes - begin);
    if (links.rank() == root) {
      copySpans({{slotOf(*regions, root), buffer + begin, length}}, config.helpers);
    }
    regions->barrier();
    if (links.rank() != root) {
      copySpans({{buffer + begin, slotOf(*regions, root), length}}, config.helpers);
    }
  }
  return true;
}

} // namespace monarch
