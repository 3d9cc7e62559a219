#pragma once

// Same-host single-copy transfers. A sender on the same host does not push
// the payload through a socket: it sends a RemoteRegion naming its buffer,
// and the receiver copies straight from the sender's memory into the posted
// tensor with process_vm_readv (cross-memory attach), then acknowledges so
// the sender may reuse the buffer. Nothing is mapped or named in /dev/shm,
// so no segment can outlive a crashed job.

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace monarch {

struct RemoteRegion {
  uint64_t address;
  uint64_t bytes;
};

// Identifies this host (boot id and host name): peers with equal ids may
// try remote reads.
uint64_t localHostId();
// Address of a word with a known value that peers read to test whether they
// may read this process's memory.
uint64_t probeWordAddress();
// Whether this process can read `pid`'s memory at `probeAddress`.
bool canReadFrom(pid_t pid, uint64_t probeAddress);
// Copies `region` of process `pid` into `dest`. False with `error` set when
// the peer is gone or the kernel refuses.
bool readRemote(pid_t pid, const RemoteRegion& region, void* dest, std::string* error);

} // namespace monarch
