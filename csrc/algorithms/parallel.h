#pragma once

#include <cstddef>
#include <functional>
#include <vector>

namespace monarch {

class HelperPool;

// Calls fn(begin, end) over slices covering [0, count) elements of
// `elementBytes`, spread across `helpers` (null: all on the caller) when the
// span is large enough to pay for waking them.
void forEachSlice(
    size_t count, size_t elementBytes, HelperPool* helpers, const std::function<void(size_t, size_t)>& fn);

struct CopySpan {
  void* dst;
  const void* src;
  size_t bytes;
};

// Copies every span, the total split evenly across `helpers`. `streaming`
// writes with non-temporal stores where the CPU has them: for destinations
// too large to stay in cache, which then cost no read before the write and
// evict nothing.
void copySpans(const std::vector<CopySpan>& spans, HelperPool* helpers, bool streaming = false);
// One copy on this thread, with non-temporal stores as copySpans' `streaming`.
void copyBytes(void* dst, const void* src, size_t bytes, bool streaming);
// Copies `bytes` of `src` into every destination on this thread, a piece
// at a time: each piece is read once and stays in the core's L2 while it is
// written to all of them (the pooled all-gather's push).
void copyToEach(const std::vector<char*>& destinations, const char* src, size_t bytes, bool streaming);

} // namespace monarch
