#pragma once

// Who this process is to its peers beyond its rank: the host it runs on, and
// a word a peer on the same host reads to learn whether it may read this
// process's memory (remote_read/). Both travel in the handshake (wire.h).

#include <cstdint>

namespace monarch {

// Identifies this host (boot id and host name): peers with equal ids are on
// one host.
uint64_t localHostId();

// The value of the word at probeWordAddress().
constexpr uint64_t kProbeWord = 0x6d6f6e6172636821ull; // "monarch!"
// Address of that word in this process.
uint64_t probeWordAddress();

} // namespace monarch
