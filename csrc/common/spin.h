#pragma once

namespace monarch {

// Tells the core that this thread is spinning on memory another core
// writes, so that it yields the pipeline to a sibling hyperthread.
inline void cpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

} // namespace monarch
