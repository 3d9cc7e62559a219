#include "algorithms/cross_memory_direct.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <string>

#include "algorithms/parallel.h"
#include "algorithms/reduce_kernels.h"
#include "algorithms/shared_signature.h"
#include "algorithms/shared_slots.h"
#include "common/helper_pool.h"
#include "common/op_failure.h"
#include "transport/remote_read/cross_memory.h"

namespace monarch {

namespace {

// A tile of each peer's buffer is read into, or written from, this thread's
// scratch with one system call per peer; at world 8 the seven tiles (448
// KiB) stay in a core's L2 while they are reduced.
constexpr size_t kPeerTileBytes = 64 * 1024;

std::atomic<uint64_t> opsRun{0};

// The peers' buffers as the agreement placed them, read and written by the
// kernel's copies; a copy that fails means the peer is gone.
class PeerMemory {
 public:
  explicit PeerMemory(const std::vector<BufferPlaces>& places) : places_(places) {}

  void read(int peer, uint64_t address, void* to, size_t bytes) const {
    std::string error;
    if (!readRemote(pidOf(peer), RemoteRegion{address, bytes}, to, &error)) {
      lost(peer, error);
    }
  }

  // Writes `bytes` of `from` at `offset` of every peer's `which` buffer,
  // from the next rank's on, so that the ranks start on different peers.
  void writeToEveryPeer(int rank, uint64_t BufferPlaces::*which, uint64_t offset, const void* from, size_t bytes) const {
    const int n = static_cast<int>(places_.size());
    for (int step = 1; step < n; ++step) {
      const int peer = (rank + step) % n;
      std::string error;
      if (!writeRemote(pidOf(peer), RemoteRegion{places_[peer].*which + offset, bytes}, from, &error)) {
        lost(peer, error);
      }
    }
  }

  // Whether this rank can reach `peer`'s `which` buffer: a read of its first
  // byte (the kernel checks a write as it checks a read).
  bool reaches(int peer, uint64_t BufferPlaces::*which) const {
    char byte = 0;
    std::string error;
    return places_[peer].*which != 0 && readRemote(pidOf(peer), RemoteRegion{places_[peer].*which, 1}, &byte, &error);
  }

 private:
  pid_t pidOf(int peer) const {
    return static_cast<pid_t>(places_[peer].pid);
  }

  [[noreturn]] static void lost(int peer, const std::string& error) {
    throw OpFailure(Status::error(
        ErrorKind::kPeerFailure, {peer},
        "lost rank " + std::to_string(peer) + ": its memory could not be reached (" + error + ")"));
  }

  const std::vector<BufferPlaces>& places_;
};

// Whether the op of `messageBytes` runs here: the same answer on every rank,
// which then all reach every peer's `which` buffer. Every rank takes part
// in the meeting whatever its own options say (`wanted`), so that a rank
// with cross_memory off sends them all through the slots rather than
// leaving its peers waiting for an answer.
bool everyRankReachesPeers(
    Links& links, SharedRegions& regions, const PeerMemory& peers, uint64_t BufferPlaces::*which,
    size_t messageBytes, bool wanted) {
  if (messageBytes < kCrossMemoryMinBytes) {
    return false;
  }
  bool reachesAll = wanted;
  for (int peer = 0; peer < links.size() && reachesAll; ++peer) {
    reachesAll = peer == links.rank() || peers.reaches(peer, which);
  }
  return everyRankCan(links, regions, reachesAll);
}

// Calls work(begin, end, scratch) for every tile of [0, count) elements of
// `elementBytes`, each claimed by one thread of `helpers`; `scratch` is that
// thread's, room for `scratchTiles` tiles.
void forEachTile(
    size_t count, size_t elementBytes, size_t scratchTiles, HelperPool* helpers,
    const std::function<void(size_t, size_t, char*)>& work) {
  const size_t tile = std::max<size_t>(1, kPeerTileBytes / elementBytes);
  const size_t tiles = (count + tile - 1) / tile;
  std::atomic<size_t> next{0};
  runOnEveryThread(tiles > 1 ? helpers : nullptr, [&](size_t) {
    thread_local std::vector<char> scratch;
    scratch.resize(std::max(scratch.size(), scratchTiles * kPeerTileBytes));
    for (size_t t = next++; t < tiles; t = next++) {
      work(t * tile, std::min(count, (t + 1) * tile), scratch.data());
    }
  });
}

// Reads tile [begin, end) of every peer's copy at `at` of its `which` buffer
// into `scratch` (one tile per rank, this rank's place unused) and returns
// every rank's copy in rank order, this rank's at `own`.
std::vector<const void*> gatherTile(
    const PeerMemory& peers, const std::vector<BufferPlaces>& places, uint64_t BufferPlaces::*which, int rank,
    const char* own, size_t at, size_t begin, size_t end, size_t elementBytes, char* scratch) {
  std::vector<const void*> copies;
  const size_t bytes = (end - begin) * elementBytes;
  for (int peer = 0; peer < static_cast<int>(places.size()); ++peer) {
    if (peer == rank) {
      copies.push_back(own + (at + begin) * elementBytes);
      continue;
    }
    char* into = scratch + static_cast<size_t>(placeInSlot(peer, rank)) * kPeerTileBytes;
    peers.read(peer, places[peer].*which + (at + begin) * elementBytes, into, bytes);
    copies.push_back(into);
  }
  return copies;
}

void finish(SharedRegions& regions) {
  regions.barrier();
  opsRun.fetch_add(1, std::memory_order_relaxed);
}

} // namespace

BufferPlaces placesOf(const void* in, const PoolSpan& inPool, const void* out, const PoolSpan& outPool) {
  return BufferPlaces{
      inPool, outPool, static_cast<int64_t>(::getpid()), reinterpret_cast<uint64_t>(in),
      reinterpret_cast<uint64_t>(out)};
}

bool crossMemoryReduceScatter(
    Links& links, SharedRegions& regions, const std::vector<BufferPlaces>& places, const void* in, void* out,
    const Partition& blocks, DataType type, ReduceKind kind, const AlgorithmConfig& config) {
  const PeerMemory peers(places);
  const size_t elem = elementSize(type);
  const size_t messageBytes = blocks.maxCount() * elem * links.size();
  const bool wanted = config.crossMemory == "all";
  if (!everyRankReachesPeers(links, regions, peers, &BufferPlaces::inputAddress, messageBytes, wanted)) {
    return false;
  }
  const int r = links.rank();
  const size_t at = blocks.offsets[r];
  auto* result = static_cast<char*>(out);
  const bool streaming = writesResultsStreaming(messageBytes);
  forEachTile(blocks.counts[r], elem, links.size() - 1, config.helpers, [&](size_t begin, size_t end, char* scratch) {
    const std::vector<const void*> copies = gatherTile(
        peers, places, &BufferPlaces::inputAddress, r, static_cast<const char*>(in), at, begin, end, elem, scratch);
    // In rank order: the result does not depend on which rank reduced it.
    reduceToEach({result + begin * elem}, copies, end - begin, type, kind, /*helpers=*/nullptr, streaming);
  });
  finish(regions);
  return true;
}

bool crossMemoryAllgather(
    Links& links, SharedRegions& regions, const std::vector<BufferPlaces>& places, const void* in, void* out,
    const Partition& blocks, size_t elementBytes, const AlgorithmConfig& config) {
  const PeerMemory peers(places);
  const int n = links.size();
  const size_t messageBytes = blocks.maxCount() * elementBytes * n;
  const bool wanted = config.crossMemory == "all";
  if (!everyRankReachesPeers(links, regions, peers, &BufferPlaces::outputAddress, messageBytes, wanted)) {
    return false;
  }
  const int r = links.rank();
  const size_t at = blocks.offsets[r] * elementBytes;
  const auto* block = static_cast<const char*>(in);
  char* own = static_cast<char*>(out) + at;
  const bool streaming = writesResultsStreaming(messageBytes);
  forEachTile(blocks.counts[r] * elementBytes, 1, 0, config.helpers, [&](size_t begin, size_t end, char*) {
    if (own != block) { // an in-place allgather's own block is there already
      copyBytes(own + begin, block + begin, end - begin, streaming);
    }
    // Each tile is read once and written to every output while it is in the cache.
    peers.writeToEveryPeer(r, &BufferPlaces::outputAddress, at + begin, block + begin, end - begin);
  });
  finish(regions);
  return true;
}

bool crossMemoryAllreduce(
    Links& links, SharedRegions& regions, const std::vector<BufferPlaces>& places, void* data, size_t count,
    DataType type, ReduceKind kind, const AlgorithmConfig& config) {
  const PeerMemory peers(places);
  const int n = links.size();
  const size_t elem = elementSize(type);
  const bool wanted = config.crossMemory != "off";
  if (!everyRankReachesPeers(links, regions, peers, &BufferPlaces::inputAddress, count * elem, wanted)) {
    return false;
  }
  const int r = links.rank();
  const auto [at, length] = chunkOfRank(count, elem, n, r);
  auto* mine = static_cast<char*>(data);
  forEachTile(length, elem, n - 1, config.helpers, [&](size_t begin, size_t end, char* scratch) {
    const std::vector<const void*> copies =
        gatherTile(peers, places, &BufferPlaces::inputAddress, r, mine, at, begin, end, elem, scratch);
    // Each rank reads and writes only its own chunk of every tensor, so no
    // rank writes what another still has to read. Cached stores: the result
    // is written from the cache to every peer next.
    char* result = mine + (at + begin) * elem;
    reduceToEach({result}, copies, end - begin, type, kind, /*helpers=*/nullptr, /*streaming=*/false);
    peers.writeToEveryPeer(r, &BufferPlaces::inputAddress, (at + begin) * elem, result, (end - begin) * elem);
  });
  finish(regions);
  return true;
}

uint64_t crossMemoryOps() {
  return opsRun.load(std::memory_order_relaxed);
}

} // namespace monarch
