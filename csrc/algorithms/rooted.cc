// Rooted collectives: broadcast and reduce. On one host they go through
// shared memory from Options.shm_min_bytes (every size by default; a reduce
// as the allreduce whose non-roots copy nothing out). Over the links tiny
// broadcasts go from the root to every rank at once, small messages walk a
// binomial tree (log2(n) hops), and large ones are pipelined in chunks,
// down a chain for broadcast, and through a reduce-scatter plus a gather
// for reduce.
//
// Ranks that disagree about the op (root, size, dtype) find out from the
// signature every frame carries (Channel::startOp): a rank that has to
// block for data from a peer first announces itself to that peer
// (Links::announce), so every rank that waits has sent its signature to
// the rank it waits on, and no two ranks can wait on each other unchecked.
// The rank that sees a disagreeing signature fails the group for everyone:
// ranks still in the op raise CollectiveMismatchError in it; a rank that
// only sends and has finished raises it from its next op on the group.
// Nothing waits for an extra message: the check costs no round trip.

#include <cstring>
#include <vector>

#include "algorithms/chunks.h"
#include "algorithms/collectives.h"
#include "algorithms/reduce_kernels.h"
#include "algorithms/shared_memory.h"

namespace monarch {

namespace {

void binomialBroadcast(Links& links, char* data, size_t bytes, int root) {
  const int n = links.size();
  const int relative = wrapRank(links.rank() - root, n);
  int mask = 1;
  while (mask < n) {
    if (relative & mask) {
      const int parent = wrapRank(relative - mask + root, n);
      links.announce(parent, Links::Announce::kIfBlocking);
      links.wait(links.recv(parent, data, bytes));
      break;
    }
    mask <<= 1;
  }
  for (mask >>= 1; mask > 0; mask >>= 1) {
    if (relative + mask < n) {
      links.send(wrapRank(relative + mask + root, n), data, bytes);
    }
  }
  links.waitAll();
}

// The root sends to every rank itself: one hop. Each hop of a tree costs a
// wake-up of the receiving rank's threads, which outweighs the root's
// sending n-1 copies while they add up to no more than a small message.
void flatBroadcast(Links& links, char* data, size_t bytes, int root) {
  if (links.rank() == root) {
    for (int distance = 1; distance < links.size(); ++distance) {
      links.send(wrapRank(root + distance, links.size()), data, bytes);
    }
  } else {
    links.announce(root, Links::Announce::kIfBlocking);
    links.recv(root, data, bytes);
  }
  links.waitAll();
}

void chainBroadcast(Links& links, char* data, size_t bytes, int root, size_t chunkBytes) {
  const int n = links.size();
  const int relative = wrapRank(links.rank() - root, n);
  const int previous = wrapRank(links.rank() - 1, n);
  const int next = wrapRank(links.rank() + 1, n);
  const bool forwards = relative + 1 < n;
  if (relative == 0) {
    forEachChunk(0, bytes, chunkBytes, [&](size_t off, size_t cnt) { links.send(next, data + off, cnt); });
  } else {
    links.announce(previous, Links::Announce::kIfBlocking);
    std::vector<Links::Handle> recvs;
    forEachChunk(0, bytes, chunkBytes, [&](size_t off, size_t cnt) {
      recvs.push_back(links.recv(previous, data + off, cnt));
    });
    size_t index = 0;
    forEachChunk(0, bytes, chunkBytes, [&](size_t off, size_t cnt) {
      links.wait(recvs[index++]);
      if (forwards) {
        links.send(next, data + off, cnt);
      }
    });
  }
  links.waitAll();
}

void binomialReduce(Links& links, char* data, size_t count, DataType type, ReduceKind kind, int root) {
  const int n = links.size();
  const int relative = wrapRank(links.rank() - root, n);
  const size_t bytes = count * elementSize(type);
  bool hasChildren = false;
  for (int mask = 1; mask < n && !(relative & mask); mask <<= 1) {
    if (relative + mask < n) {
      links.announce(wrapRank(relative + mask + root, n), Links::Announce::kIfBlocking);
      hasChildren = true;
    }
  }
  // The root accumulates in `data`; an inner rank in a copy, since its
  // `data` is only read.
  char* sum = data;
  if (relative != 0 && hasChildren) {
    sum = static_cast<char*>(links.workspace(bytes, Links::Workspace::kResult));
    std::memcpy(sum, data, bytes);
  }
  char* scratch = static_cast<char*>(links.workspace(bytes, Links::Workspace::kAlgorithm));
  for (int mask = 1; mask < n; mask <<= 1) {
    if (relative & mask) {
      links.wait(links.send(wrapRank(relative - mask + root, n), sum, bytes));
      return;
    }
    if (relative + mask < n) {
      links.wait(links.recv(wrapRank(relative + mask + root, n), scratch, bytes));
      reduceInto(sum, scratch, count, type, kind);
    }
  }
}

} // namespace

void broadcast(Links& links, void* data, size_t bytes, int root, const AlgorithmConfig& config) {
  if (links.size() == 1) {
    return;
  }
  if (bytes == 0) {
    return emptyOp(links);
  }
  if (sharedBroadcast(links, data, bytes, root, config)) {
    return;
  }
  if (bytes * (links.size() - 1) <= config.smallMessageBytes) {
    flatBroadcast(links, static_cast<char*>(data), bytes, root);
  } else if (bytes <= config.smallMessageBytes) {
    binomialBroadcast(links, static_cast<char*>(data), bytes, root);
  } else {
    chainBroadcast(links, static_cast<char*>(data), bytes, root, config.chunkBytes);
  }
}

void reduce(Links& links, void* data, size_t count, DataType type, ReduceKind kind, int root, const AlgorithmConfig& config) {
  const int n = links.size();
  if (n == 1) {
    return;
  }
  if (count == 0) {
    return emptyOp(links);
  }
  if (sharedReduce(links, data, count, type, kind, root, config)) {
    return;
  }
  auto* bytes = static_cast<char*>(data);
  if (count * elementSize(type) <= config.smallMessageBytes || count < static_cast<size_t>(n)) {
    return binomialReduce(links, bytes, count, type, kind, root);
  }
  // A reduce-scatter, which checks every rank's signature, the root
  // included, before the blocks go to the root: the root reduces its block
  // in place, the others theirs into reused memory, reading `data` where it
  // lies.
  Partition blocks = Partition::even(count, n);
  const size_t elem = elementSize(type);
  const int r = links.rank();
  char* block = r == root ? bytes + blocks.offsets[r] * elem
                          : static_cast<char*>(links.workspace(blocks.counts[r] * elem, Links::Workspace::kResult));
  reduceScatterInto(links, bytes, block, blocks, type, kind, config);
  if (r != root) {
    links.send(root, block, blocks.counts[r] * elem);
  } else {
    for (int peer = 0; peer < n; ++peer) {
      if (peer != root) {
        links.recv(peer, bytes + blocks.offsets[peer] * elem, blocks.counts[peer] * elem);
      }
    }
  }
  links.waitAll();
}

} // namespace monarch
