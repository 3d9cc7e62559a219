#include "algorithms/hierarchical.h"

#include <algorithm>
#include <unordered_map>
#include <vector>

#include "transport/sub_links.h"

namespace monarch {

namespace {

// The ranks of each host, in rank order, hosts ordered by their lowest rank:
// the same on every rank, since every rank sees the same host ids.
std::vector<std::vector<int>> ranksByHost(const Links& links) {
  std::vector<std::vector<int>> hosts;
  std::unordered_map<uint64_t, size_t> indexOfHost; // linear in the group size: this runs per op
  for (int rank = 0; rank < links.size(); ++rank) {
    auto [it, added] = indexOfHost.emplace(links.hostOf(rank), hosts.size());
    if (added) {
      hosts.emplace_back();
    }
    hosts[it->second].push_back(rank);
  }
  return hosts;
}

} // namespace

bool hierarchicalAllreduce(Links& links, void* data, size_t count, DataType type, ReduceKind kind, const AlgorithmConfig& config) {
  const auto hosts = ranksByHost(links);
  const size_t perHost = hosts[0].size();
  const bool uniform = std::all_of(hosts.begin(), hosts.end(), [&](const auto& h) { return h.size() == perHost; });
  if (hosts.size() < 2 || perHost < 2 || !uniform || count < perHost) {
    return false;
  }
  int host = 0;
  int local = 0;
  for (size_t h = 0; h < hosts.size(); ++h) {
    auto it = std::find(hosts[h].begin(), hosts[h].end(), links.rank());
    if (it != hosts[h].end()) {
      host = static_cast<int>(h);
      local = static_cast<int>(it - hosts[h].begin());
    }
  }
  std::vector<int> peersHoldingMyBlock;
  for (const auto& ranks : hosts) {
    peersHoldingMyBlock.push_back(ranks[local]);
  }
  // Two phases on this host's ranks, each its own op in their shared memory.
  SubLinks scatterOnHost(links, hosts[host], local, /*phase=*/0);
  SubLinks acrossHosts(links, peersHoldingMyBlock, host);
  SubLinks gatherOnHost(links, hosts[host], local, /*phase=*/1);

  const size_t elem = elementSize(type);
  Partition blocks = Partition::even(count, static_cast<int>(perHost));
  reduceScatter(scatterOnHost, data, blocks, type, kind, config);
  char* mine = static_cast<char*>(data) + blocks.offsets[local] * elem;
  allreduce(acrossHosts, mine, blocks.counts[local], type, kind, config);
  allgather(gatherOnHost, data, blocks, elem, config);
  return true;
}

} // namespace monarch
