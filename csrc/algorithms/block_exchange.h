#pragma once

// The two ways reduceScatter and allgather (collectives.h) move blocks; the
// public functions pick one by group size (AlgorithmConfig::directMaxRanks).

#include "algorithms/collectives.h"

namespace monarch {

// Around a ring: n-1 dependent steps, one neighbour each way (ring.cc).
void ringReduceScatter(Links& links, void* data, const Partition& blocks, DataType type, ReduceKind kind, const AlgorithmConfig& config);
void ringAllgather(Links& links, void* data, const Partition& blocks, size_t elementBytes, const AlgorithmConfig& config);

// All pairs at once: one step, every peer each way (direct.cc).
void directReduceScatter(Links& links, void* data, const Partition& blocks, DataType type, ReduceKind kind, const AlgorithmConfig& config);
void directAllgather(Links& links, void* data, const Partition& blocks, size_t elementBytes, const AlgorithmConfig& config);

} // namespace monarch
