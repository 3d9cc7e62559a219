#pragma once

// How the shared-memory collectives (shared_memory.h) check that every rank
// runs the same op, with no message: no data frame moves, so no frame
// carries the signature. Each rank writes its op's signature into a stamp
// at the end of its own region and reads every peer's before it touches
// their data. Waiting for the stamps costs nothing the op would not wait
// for anyway: a rank needs every peer's data before it can finish.
//
// A peer that disagrees fails the group with CollectiveMismatchError on
// every rank, in this op: it wrote a stamp of another signature (another
// root, size, dtype or reduce op: every rank on the same path sees it), or
// it took a path over the links for this op, and then its frames or its
// announcement (Links::announce) reach a rank here, which the channel
// checks on arrival while this rank waits for the stamp.

#include <vector>

#include "algorithms/collectives.h"

namespace monarch {

// Publishes this rank's signature of the current op and returns once every
// peer has published the same one; fails the group (Links::failMismatch)
// otherwise. Returns whether every rank's `fits` was true. `places` travel
// with the signature, not compared: where this rank's input and output lie;
// a non-null `everyRank` receives every rank's, by rank.
bool agreeThroughSharedMemory(
    Links& links, SharedRegions& regions, bool fits = true, const BufferPlaces& places = {},
    std::vector<BufferPlaces>* everyRank = nullptr);

// Whether every rank's `can` is true, once each has said (a meeting of all
// ranks, once per op, after the agreement).
bool everyRankCan(Links& links, SharedRegions& regions, bool can);

// The meeting before a round's readers copy out what its writers wrote: in
// an op's first round the agreement on the op, in later ones a barrier.
void meetForRound(Links& links, SharedRegions& regions, bool firstRound);

} // namespace monarch
