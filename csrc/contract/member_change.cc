#include "contract/member_change.h"

namespace monarch::gpu {

std::optional<std::vector<int64_t>> membersThatLeft(const std::vector<uint64_t>& before, const std::vector<uint64_t>& after) {
  std::vector<int64_t> left;
  size_t next = 0; // the next member of `after` to find in `before`
  for (size_t rank = 0; rank < before.size(); ++rank) {
    if (next < after.size() && before[rank] == after[next]) {
      ++next;
    } else {
      left.push_back(static_cast<int64_t>(rank));
    }
  }
  if (next != after.size() || left.empty()) {
    return std::nullopt;
  }
  return left;
}

} // namespace monarch::gpu
