#include "contract/device_group.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include <algorithm>

namespace monarch::gpu {

DeviceGroup shrunkGroup(const DeviceGroup& parent, const std::vector<int64_t>& excluded, uint64_t generation) {
  DeviceGroup child = parent;
  std::string key = "shrink" + std::to_string(generation);
  int newRank = 0;
  child.size = 0;
  for (int rank = 0; rank < parent.size; ++rank) {
    if (std::find(excluded.begin(), excluded.end(), rank) != excluded.end()) {
      continue;
    }
    if (rank == parent.rank) {
      newRank = child.size;
    }
    key += "-" + std::to_string(rank);
    ++child.size;
  }
  child.rank = newRank;
  child.name = parent.name + "/" + key;
  // Survivors agree on the key; a later shrink of the same parent gets a new one.
  if (parent.store) {
    child.store = c10::make_intrusive<c10d::PrefixStore>(key, parent.store);
  }
  return child;
}

} // namespace monarch::gpu
