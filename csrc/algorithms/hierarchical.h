#pragma once

#include "algorithms/collectives.h"

namespace monarch {

// Allreduce over several hosts in three phases: reduce-scatter among the
// ranks of each host, allreduce of each block among the ranks that hold it
// (one per host), allgather within each host. Across hosts each rank moves
// only its block, 1/(ranks per host) of the tensor, instead of all of it;
// within a host the phases go through shared memory when the host's ranks
// have it (Links::hostRegions), each host deciding for itself.
// Returns false, having done nothing, unless the group spans several hosts
// with the same number (at least 2) of ranks on each.
bool hierarchicalAllreduce(Links& links, void* data, size_t count, DataType type, ReduceKind kind, const AlgorithmConfig& config);

} // namespace monarch
