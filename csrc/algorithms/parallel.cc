#include "algorithms/parallel.h"

#include <algorithm>
#include <cstring>

#include "common/helper_pool.h"

namespace monarch {

namespace {

// Below this, a slice costs more to hand to another thread than to process.
constexpr size_t kMinSliceBytes = 256 * 1024;

// Copies bytes [begin, end) of the concatenation of `spans`.
void copyRange(const std::vector<CopySpan>& spans, size_t begin, size_t end) {
  size_t spanStart = 0;
  for (const CopySpan& span : spans) {
    size_t from = std::max(begin, spanStart);
    size_t to = std::min(end, spanStart + span.bytes);
    if (from < to) {
      std::memcpy(
          static_cast<char*>(span.dst) + (from - spanStart), static_cast<const char*>(span.src) + (from - spanStart),
          to - from);
    }
    spanStart += span.bytes;
    if (spanStart >= end) {
      return;
    }
  }
}

} // namespace

void forEachSlice(
    size_t count, size_t elementBytes, HelperPool* helpers, const std::function<void(size_t, size_t)>& fn) {
  const size_t threads = helpers ? static_cast<size_t>(helpers->threads()) : 1;
  const size_t slices = std::min(threads, count * elementBytes / kMinSliceBytes);
  if (slices < 2) {
    return fn(0, count);
  }
  const size_t per = (count + slices - 1) / slices;
  helpers->run(slices, [&](size_t i) { fn(i * per, std::min(count, (i + 1) * per)); });
}

void copySpans(const std::vector<CopySpan>& spans, HelperPool* helpers) {
  size_t total = 0;
  for (const CopySpan& span : spans) {
    total += span.bytes;
  }
  forEachSlice(total, 1, helpers, [&](size_t begin, size_t end) { copyRange(spans, begin, end); });
}

} // namespace monarch
