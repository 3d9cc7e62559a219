#include "transport/shm/tensor_pool.h"

#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>

#include "transport/shm/segment.h"

namespace monarch {

namespace {

constexpr size_t kPageBytes = 4096;

struct Block {
  uint64_t id;
  pid_t pid; // its creator: a forked child must not report its parent's blocks as its own
  size_t bytes;
  std::unique_ptr<SharedSegment> segment;
  bool inUse;
};

struct PoolState {
  std::mutex mutex;
  uint64_t lastId = 0;
  std::map<uintptr_t, Block> byAddress; // every block, in use or not
  std::multimap<size_t, uintptr_t> freeBySize;

  // At exit: the names only; tensors freed later still find their memory.
  void unlinkNames() {
    std::lock_guard<std::mutex> lock(mutex);
    for (auto& [address, block] : byAddress) {
      if (block.pid == ::getpid()) {
        block.segment->unlink();
      }
    }
  }
};

// Never destroyed: a tensor may be freed after static destructors ran.
PoolState& state() {
  static PoolState* pool = new PoolState;
  return *pool;
}

struct NamesRemovedAtExit {
  ~NamesRemovedAtExit() {
    state().unlinkNames();
  }
};

} // namespace

std::string poolBlockName(pid_t pid, uint64_t block) {
  char name[64];
  std::snprintf(name, sizeof(name), "/monarch-%ld-pool-%016" PRIx64, static_cast<long>(pid), block);
  return name;
}

SharedTensorPool& SharedTensorPool::instance() {
  // Never destroyed either, for the same reason as its state.
  static SharedTensorPool* pool = new SharedTensorPool;
  static NamesRemovedAtExit remover;
  return *pool;
}

void* SharedTensorPool::allocate(size_t bytes, std::string* error) {
  const size_t rounded = (std::max<size_t>(bytes, 1) + kPageBytes - 1) / kPageBytes * kPageBytes;
  PoolState& pool = state();
  std::lock_guard<std::mutex> lock(pool.mutex);
  const pid_t self = ::getpid();
  for (auto it = pool.freeBySize.find(rounded); it != pool.freeBySize.end() && it->first == rounded; ++it) {
    Block& block = pool.byAddress.at(it->second);
    if (block.pid == self) {
      block.inUse = true;
      void* data = reinterpret_cast<void*>(it->second);
      pool.freeBySize.erase(it);
      return data;
    }
  }
  const uint64_t id = ++pool.lastId;
  const std::string name = poolBlockName(self, id);
  std::unique_ptr<SharedSegment> segment = SharedSegment::create(name, rounded, error);
  if (!segment) {
    // A name with this pid left by an earlier process of the same pid that
    // was killed: no live process can own it.
    SharedSegment::unlinkName(name);
    segment = SharedSegment::create(name, rounded, error);
  }
  if (!segment) {
    return nullptr;
  }
  void* data = segment->data();
  pool.byAddress.emplace(reinterpret_cast<uintptr_t>(data), Block{id, self, rounded, std::move(segment), true});
  return data;
}

void SharedTensorPool::release(void* data) {
  PoolState& pool = state();
  std::lock_guard<std::mutex> lock(pool.mutex);
  auto it = pool.byAddress.find(reinterpret_cast<uintptr_t>(data));
  if (it == pool.byAddress.end() || !it->second.inUse) {
    return;
  }
  it->second.inUse = false;
  pool.freeBySize.emplace(it->second.bytes, it->first);
}

PoolSpan SharedTensorPool::find(const void* data, size_t bytes) const {
  PoolState& pool = state();
  const auto address = reinterpret_cast<uintptr_t>(data);
  std::lock_guard<std::mutex> lock(pool.mutex);
  auto it = pool.byAddress.upper_bound(address);
  if (it == pool.byAddress.begin()) {
    return {};
  }
  --it;
  const Block& block = it->second;
  if (!block.inUse || block.pid != ::getpid() || address + bytes > it->first + block.bytes) {
    return {};
  }
  return PoolSpan{static_cast<int64_t>(block.pid), block.id, block.bytes, address - it->first};
}

} // namespace monarch
