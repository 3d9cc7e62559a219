#pragma once

// Memory for tensors that the peers of a one-host group can map
// (Backend::allocateTensor, FSDP2's set_allocate_memory_from_process_group_for_comm):
// the shared-memory collectives read and write such a tensor in place, with
// no copy into their slots (shared_direct.h). One pool per process, shared
// by its groups. Each allocation is a POSIX shared-memory segment whose name
// carries the process's pid and a block number that is never reused, so a
// peer that has mapped block b once can keep that mapping: a freed block
// goes back to the pool for the next allocation of its size, as CUDA's
// caching allocator keeps freed memory, and is never unmapped while the
// process runs. The names are removed at exit; those of a killed process
// are removed as stale by the next group that sets up on the host.

#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include "transport/shared_regions.h"

namespace monarch {

class SharedTensorPool {
 public:
  static SharedTensorPool& instance();

  // At least `bytes` of shared memory, page-aligned; null with `error` set
  // when /dev/shm cannot hold it.
  void* allocate(size_t bytes, std::string* error);
  // Returns memory from allocate() to the pool.
  void release(void* data);
  // Where [data, data + bytes) lies, when all of it is in one of this
  // process's blocks; a span of block 0 otherwise.
  PoolSpan find(const void* data, size_t bytes) const;

  // Ops of this process that ran on pooled tensors with no copy through the
  // slots (shared_direct.h), all groups together.
  void countDirectOp() {
    directOps_.fetch_add(1, std::memory_order_relaxed);
  }
  uint64_t directOps() const {
    return directOps_.load(std::memory_order_relaxed);
  }

 private:
  SharedTensorPool() = default;

  std::atomic<uint64_t> directOps_{0};
};

// "/monarch-<pid>-pool-<block>".
std::string poolBlockName(pid_t pid, uint64_t block);

} // namespace monarch
