#include "algorithms/parallel.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "common/helper_pool.h"

namespace monarch {

namespace {

// Below this, a slice costs more to hand to another thread than to process.
constexpr size_t kMinSliceBytes = 256 * 1024;

using CopyFn = void (*)(char* dst, const char* src, size_t bytes);

void cachedCopy(char* dst, const char* src, size_t bytes) {
  std::memcpy(dst, src, bytes);
}

void streamingCopy(char* dst, const char* src, size_t bytes) {
#if defined(__SSE2__)
  constexpr size_t kLine = 64;
  size_t head = std::min(bytes, (16 - (reinterpret_cast<uintptr_t>(dst) & 15)) & 15);
  std::memcpy(dst, src, head);
  dst += head;
  src += head;
  bytes -= head;
  const size_t body = bytes / kLine * kLine;
  for (size_t i = 0; i < body; i += kLine) {
    for (size_t lane = 0; lane < kLine; lane += 16) {
      __m128i value = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + lane));
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + lane), value);
    }
  }
  std::memcpy(dst + body, src + body, bytes - body);
  _mm_sfence(); // the stores are weakly ordered: publish them before the caller goes on
#else
  std::memcpy(dst, src, bytes);
#endif
}

// Copies bytes [begin, end) of the concatenation of `spans`.
void copyRange(const std::vector<CopySpan>& spans, size_t begin, size_t end, CopyFn copy) {
  size_t spanStart = 0;
  for (const CopySpan& span : spans) {
    size_t from = std::max(begin, spanStart);
    size_t to = std::min(end, spanStart + span.bytes);
    if (from < to) {
      copy(
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

void copySpans(const std::vector<CopySpan>& spans, HelperPool* helpers, bool streaming) {
  size_t total = 0;
  for (const CopySpan& span : spans) {
    total += span.bytes;
  }
  CopyFn copy = streaming ? streamingCopy : cachedCopy;
  forEachSlice(total, 1, helpers, [&](size_t begin, size_t end) { copyRange(spans, begin, end, copy); });
}

void copyBytes(void* dst, const void* src, size_t bytes, bool streaming) {
  (streaming ? streamingCopy : cachedCopy)(static_cast<char*>(dst), static_cast<const char*>(src), bytes);
}

void copyToEach(const std::vector<char*>& destinations, const char* src, size_t bytes, bool streaming) {
  // A piece this size stays in the core's L2 while it is written to every destination.
  constexpr size_t kPieceBytes = 64 * 1024;
  CopyFn copy = streaming ? streamingCopy : cachedCopy;
  for (size_t from = 0; from < bytes; from += kPieceBytes) {
    const size_t length = std::min(kPieceBytes, bytes - from);
    for (char* to : destinations) {
      copy(to + from, src + from, length);
    }
  }
}

} // namespace monarch
