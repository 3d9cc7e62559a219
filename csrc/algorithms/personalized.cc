// Collectives where each pair exchanges its own data: gather, scatter,
// alltoall. On one host what fits a shared-memory slot goes through it
// (shared_personalized.cc); otherwise every transfer is posted at once and
// the links run them in parallel. Barrier is a dissemination of empty
// messages. An op with nothing to move announces its signature to every
// peer instead.

#include <cstring>

#include "algorithms/chunks.h"
#include "algorithms/collectives.h"
#include "algorithms/shared_memory.h"

namespace monarch {

// In gather and scatter a rank but the root talks to the root alone, and
// one side of each pair only sends. The side that receives announces itself
// first (rooted.cc says why), so a disagreement about the root, size or
// dtype fails the group: the receivers raise in this op, a sender that has
// finished raises from its next op.
void gather(
    Links& links, const void* in, const std::vector<void*>& outs, size_t bytes, int root, const AlgorithmConfig& config) {
  if (sharedGather(links, in, outs, bytes, root, config)) {
    return;
  }
  const int n = links.size();
  const int r = links.rank();
  if (r != root) {
    links.send(root, in, bytes);
  } else {
    for (int peer = 0; peer < n; ++peer) {
      if (peer != r) {
        links.announce(peer, Links::Announce::kIfBlocking);
        links.recv(peer, outs[peer], bytes);
      }
    }
    if (outs[r] != in) {
      std::memcpy(outs[r], in, bytes);
    }
  }
  links.waitAll();
}

void scatter(
    Links& links, const std::vector<const void*>& ins, void* out, size_t bytes, int root, const AlgorithmConfig& config) {
  if (sharedScatter(links, ins, out, bytes, root, config)) {
    return;
  }
  const int n = links.size();
  const int r = links.rank();
  if (r != root) {
    links.announce(root, Links::Announce::kIfBlocking);
    links.recv(root, out, bytes);
  } else {
    for (int peer = 0; peer < n; ++peer) {
      if (peer != r) {
        links.send(peer, ins[peer], bytes);
      }
    }
    if (ins[r] != out) {
      std::memcpy(out, ins[r], bytes);
    }
  }
  links.waitAll();
}

void alltoall(
    Links& links, const void* in, const Partition& sendBlocks, void* out, const Partition& recvBlocks,
    const AlgorithmConfig& config) {
  if (sharedAlltoall(links, in, sendBlocks, out, recvBlocks, config)) {
    return;
  }
  const int n = links.size();
  const int r = links.rank();
  const auto* src = static_cast<const char*>(in);
  auto* dest = static_cast<char*>(out);
  // Rotate the peer order so that not every rank sends to rank 0 first.
  for (int i = 1; i < n; ++i) {
    int from = wrapRank(r - i, n);
    links.recv(from, dest + recvBlocks.offsets[from], recvBlocks.counts[from]);
  }
  for (int i = 1; i < n; ++i) {
    int to = wrapRank(r + i, n);
    links.send(to, src + sendBlocks.offsets[to], sendBlocks.counts[to]);
  }
  if (recvBlocks.counts[r] > 0) {
    std::memcpy(dest + recvBlocks.offsets[r], src + sendBlocks.offsets[r], recvBlocks.counts[r]);
  }
  links.waitAll();
}

void emptyOp(Links& links) {
  for (int peer = 0; peer < links.size(); ++peer) {
    if (peer != links.rank()) {
      links.announce(peer, Links::Announce::kNow);
    }
  }
}

void barrier(Links& links) {
  const int n = links.size();
  const int r = links.rank();
  for (int distance = 1; distance < n; distance <<= 1) {
    auto sent = links.send(wrapRank(r + distance, n), nullptr, 0);
    links.wait(links.recv(wrapRank(r - distance, n), nullptr, 0));
    links.wait(sent);
  }
}

} // namespace monarch
