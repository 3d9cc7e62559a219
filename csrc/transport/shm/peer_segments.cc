#include "transport/shm/peer_segments.h"

#include <cstdint>
#include <string>

#include "common/logging.h"

namespace monarch {

namespace {

// Every rank says whether it succeeded; true when all did.
bool allSucceeded(Links& links, bool succeeded) {
  const int n = links.size();
  const uint8_t mine = succeeded ? 1 : 0;
  std::vector<uint8_t> theirs(n, 1);
  for (int peer = 0; peer < n; ++peer) {
    if (peer != links.rank()) {
      links.send(peer, &mine, 1);
      links.recv(peer, &theirs[peer], 1);
    }
  }
  links.waitAll();
  for (uint8_t answer : theirs) {
    succeeded = succeeded && answer == 1;
  }
  return succeeded;
}

} // namespace

std::unique_ptr<PeerSegments> PeerSegments::setUp(
    Links& links, const std::vector<Owner>& ownerByRank, uint64_t channelId, size_t bytesPerRegion) {
  const int n = links.size();
  const int r = links.rank();
  std::vector<std::string> names;
  for (const Owner& owner : ownerByRank) {
    names.push_back(segmentName(owner.pid, owner.endpointId, channelId));
  }
  removeStaleSegments();
  std::unique_ptr<PeerSegments> result(new PeerSegments());
  result->segments_.resize(n);
  std::string error;
  result->segments_[r] = SharedSegment::create(names[r], bytesPerRegion, &error);
  try {
    bool mapped = allSucceeded(links, result->segments_[r] != nullptr);
    for (int peer = 0; peer < n && mapped; ++peer) {
      if (peer != r) {
        result->segments_[peer] = SharedSegment::open(names[peer], bytesPerRegion, &error);
        mapped = result->segments_[peer] != nullptr;
      }
    }
    mapped = allSucceeded(links, mapped);
    // Every rank has mapped every segment or given up: no name is needed.
    if (result->segments_[r]) {
      result->segments_[r]->unlink();
    }
    if (!mapped) {
      MONARCH_LOG(kWarn) << "rank " << r << ": shared memory unavailable, large payloads go over the links"
                         << (error.empty() ? "" : ": " + error);
      return nullptr;
    }
  } catch (...) {
    // A peer failed during setup: it may never unlink its name.
    for (const std::string& name : names) {
      SharedSegment::unlinkName(name);
    }
    throw;
  }
  for (const auto& segment : result->segments_) {
    result->regions_.byRank.push_back(segment->data());
  }
  result->regions_.bytesPerRegion = bytesPerRegion;
  return result;
}

} // namespace monarch
