#pragma once

#include <algorithm>
#include <cstddef>

namespace monarch {

// Calls fn(offset, count) for consecutive chunks of at most `chunk` elements
// covering [begin, begin + count).
template <typename Fn>
void forEachChunk(size_t begin, size_t count, size_t chunk, Fn fn) {
  for (size_t done = 0; done < count; done += chunk) {
    fn(begin + done, std::min(chunk, count - done));
  }
}

inline int wrapRank(int rank, int size) {
  return ((rank % size) + size) % size;
}

inline size_t chunkElements(size_t chunkBytes, size_t elementBytes) {
  return std::max<size_t>(1, chunkBytes / elementBytes);
}

// How much of [begin, begin + length) lies within a span of `count`.
inline size_t clipped(size_t count, size_t begin, size_t length) {
  return begin >= count ? 0 : std::min(length, count - begin);
}

} // namespace monarch
