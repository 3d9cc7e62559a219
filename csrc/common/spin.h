#pragma once

#include <chrono>
#include <cstdint>

namespace monarch {

// Tells the core that this thread is spinning on memory another core
// writes, so that it yields the pipeline to a sibling hyperthread.
inline void cpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// How long a thread that waits for another thread on this host looks
// before it blocks: about what a wake-up through the kernel costs the
// waker and the woken, so that a wait that ends within it costs neither.
constexpr auto kSpinBeforeBlocking = std::chrono::microseconds(20);

// Looks at `ready()` for up to kSpinBeforeBlocking (reading the clock every
// 64 looks); whether it held. A hint only: the caller then waits for real.
template <typename Ready>
bool spinUntil(const Ready& ready) {
  const auto start = std::chrono::steady_clock::now();
  for (uint32_t looks = 1;; ++looks) {
    if (ready()) {
      return true;
    }
    if (looks % 64 == 0 && std::chrono::steady_clock::now() - start >= kSpinBeforeBlocking) {
      return false;
    }
    cpuRelax();
  }
}

} // namespace monarch
