#pragma once

// Cross-memory attach: copying straight out of, or into, another process on
// this host with process_vm_readv / process_vm_writev. Nothing is mapped or
// named in /dev/shm, so nothing can outlive a crashed job.

#include <sys/types.h>

#include <cstdint>
#include <string>

namespace monarch {

// A buffer of another process: a remote read frame names the sender's, a
// cross-memory collective its peers' (algorithms/cross_memory_direct.h).
struct RemoteRegion {
  uint64_t address;
  uint64_t bytes;
};

// Whether this process can read `pid`'s memory at `probeAddress` (where that
// process keeps kProbeWord, see host_identity.h).
bool canReadFrom(pid_t pid, uint64_t probeAddress);
// Copies `region` of process `pid` into `dest`. False with `error` set when
// the peer is gone or the kernel refuses.
bool readRemote(pid_t pid, const RemoteRegion& region, void* dest, std::string* error);
// Copies `region.bytes` of `src` into `region` of process `pid`; false, as
// readRemote.
bool writeRemote(pid_t pid, const RemoteRegion& region, const void* src, std::string* error);

} // namespace monarch
