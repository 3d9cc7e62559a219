#pragma once

// How a group's device backend follows a native reconfigure (see
// backend/device_dispatch.h): a pure decision on the members before and
// after, so that it is tested without a GPU.

#include <cstdint>
#include <optional>
#include <vector>

namespace monarch::gpu {

// The ranks of `before` that left when `after` is `before` less some members,
// the rest in the same order: then the communicators shrink (ncclCommShrink
// keeps the survivors' order). nullopt when a member is new, the order
// changed, or nobody left: then they are made anew. Members are named by
// their endpoint ids, in rank order.
std::optional<std::vector<int64_t>> membersThatLeft(const std::vector<uint64_t>& before, const std::vector<uint64_t>& after);

} // namespace monarch::gpu
