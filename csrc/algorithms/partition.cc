#include <algorithm>

#include "algorithms/collectives.h"

namespace monarch {

Partition Partition::even(size_t count, int parts) {
  Partition partition;
  size_t base = count / parts;
  size_t extra = count % parts;
  size_t offset = 0;
  for (int i = 0; i < parts; ++i) {
    size_t n = base + (static_cast<size_t>(i) < extra ? 1 : 0);
    partition.offsets.push_back(offset);
    partition.counts.push_back(n);
    offset += n;
  }
  return partition;
}

Partition Partition::fromCounts(const std::vector<size_t>& counts) {
  Partition partition;
  size_t offset = 0;
  for (size_t n : counts) {
    partition.offsets.push_back(offset);
    partition.counts.push_back(n);
    offset += n;
  }
  return partition;
}

size_t Partition::maxCount() const {
  return counts.empty() ? 0 : *std::max_element(counts.begin(), counts.end());
}

} // namespace monarch
