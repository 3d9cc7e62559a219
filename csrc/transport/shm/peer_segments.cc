#include "transport/shm/peer_segments.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <climits>
#include <cstdint>
#include <ctime>
#include <string>
#include <thread>

#include "common/logging.h"
#include "common/spin.h"
#include "transport/shm/tensor_pool.h"

namespace monarch {

namespace {

struct alignas(64) PaddedWord {
  std::atomic<uint64_t> value;
};

// Start of every segment. Each field has a cache line of its own: the owner
// writes `arrivals`, the peers spin on it.
struct SegmentHeader {
  alignas(64) std::atomic<uint32_t> arrivals; // barriers the owner has entered
  alignas(64) std::atomic<uint32_t> sleepers; // peers in a futex wait on `arrivals`
  // Used in the first rank's segment only: rung (and woken) by a store() that
  // finds a thread asleep in await(), of any rank.
  alignas(64) std::atomic<uint32_t> bell;
  alignas(64) std::atomic<uint32_t> bellSleepers;
  PaddedWord published[SharedRegions::kMaxTiles];
  // Used in the first rank's segment only, for the whole group.
  PaddedWord claimed[SharedRegions::kMaxTiles];
  PaddedWord reduced[SharedRegions::kMaxTiles];
};

// The region follows the header, cache-line aligned.
constexpr size_t kHeaderBytes = sizeof(SegmentHeader);
static_assert(kHeaderBytes % 64 == 0, "the region must start on a cache line");

SegmentHeader& headerOf(const SharedSegment& segment) {
  return *reinterpret_cast<SegmentHeader*>(segment.data());
}
// Longest kernel sleep between checks that the group is still healthy.
constexpr long kSleepNanos = 1000 * 1000;
// A wait on a word yields the core after the spin, and from this long
// sleeps in the kernel until the word is stored: a peer that far behind is
// busy elsewhere or descheduled, and a waiter that kept looking would take
// a core from it where ranks outnumber cores. Not shorter: every store a
// sleeper waits for costs its writer a wake-up call, and from 100 us the
// 64 MB ops on the 16-core host were 4-37% slower than before (one run).
constexpr auto kYield = std::chrono::milliseconds(1);

void futexWait(std::atomic<uint32_t>* word, uint32_t expected) {
  timespec timeout{0, kSleepNanos};
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected, &timeout, nullptr, 0);
}

void futexWakeAll(std::atomic<uint32_t>* word) {
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

// Returns `word`'s value once ready(value) holds. Spins first
// (spinUntil: enough for a peer that is a round behind, short enough not to
// starve one that shares this core); past that, calls pause(value, time
// waited) on every 64th look: it checks the group and blocks or yields a
// while.
template <typename T, typename Ready, typename Pause>
T pollUntil(const std::atomic<T>& word, const Ready& ready, const Pause& pause) {
  const auto start = std::chrono::steady_clock::now();
  T seen{};
  if (spinUntil([&] { return ready(seen = word.load(std::memory_order_acquire)); })) {
    return seen;
  }
  for (uint32_t looks = 1;; ++looks) {
    seen = word.load(std::memory_order_acquire);
    if (ready(seen)) {
      return seen;
    }
    if (looks % 64 == 0) {
      pause(seen, std::chrono::steady_clock::now() - start);
    } else {
      cpuRelax();
    }
  }
}

// Whether `seen` has reached `count`, with the counter wrapping.
inline bool reached(uint32_t seen, uint32_t count) {
  return static_cast<int32_t>(seen - count) >= 0;
}

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
    Links& links, const std::vector<Owner>& ownerByRank, uint64_t channelId, size_t bytesPerRegion,
    WaitCheck checkWhileWaiting) {
  const int n = links.size();
  const int r = links.rank();
  std::vector<std::string> names;
  for (const Owner& owner : ownerByRank) {
    names.push_back(segmentName(owner.pid, owner.endpointId, channelId));
  }
  removeStaleSegments();
  std::unique_ptr<PeerSegments> result(new PeerSegments(r, bytesPerRegion, std::move(checkWhileWaiting)));
  auto& segments = result->segments_;
  segments.resize(n);
  const size_t segmentBytes = kHeaderBytes + bytesPerRegion;
  std::string error;
  // A new segment reads as zeros: no barrier entered yet.
  segments[r] = SharedSegment::create(names[r], segmentBytes, &error);
  try {
    bool mapped = allSucceeded(links, segments[r] != nullptr);
    for (int peer = 0; peer < n && mapped; ++peer) {
      if (peer != r) {
        segments[peer] = SharedSegment::open(names[peer], segmentBytes, &error);
        mapped = segments[peer] != nullptr;
      }
    }
    mapped = allSucceeded(links, mapped);
    // Every rank has mapped every segment or given up: no name is needed.
    if (segments[r]) {
      segments[r]->unlink();
    }
    if (!mapped) {
      MONARCH_LOG(kWarn) << "rank " << r << " of " << n
                         << " on this host: shared memory unavailable, large payloads go over the links"
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
  return result;
}

char* PeerSegments::region(int rank) const {
  return segments_[rank]->data() + kHeaderBytes;
}

void PeerSegments::barrier() {
  const uint32_t count = ++barriers_;
  SegmentHeader& mine = headerOf(*segments_[rank_]);
  // Sequentially consistent with the sleepers' registration (awaitArrival):
  // either this sees a sleeper and wakes it, or the sleeper's futex wait
  // sees the new count and does not sleep.
  mine.arrivals.store(count, std::memory_order_seq_cst);
  if (mine.sleepers.load(std::memory_order_seq_cst) > 0) {
    futexWakeAll(&mine.arrivals);
  }
  for (int peer = 0; peer < static_cast<int>(segments_.size()); ++peer) {
    if (peer != rank_) {
      awaitArrival(peer, count);
    }
  }
}

void PeerSegments::awaitArrival(int rank, uint32_t count) {
  SegmentHeader& theirs = headerOf(*segments_[rank]);
  pollUntil(
      theirs.arrivals, [count](uint32_t seen) { return reached(seen, count); },
      [&](uint32_t seen, std::chrono::steady_clock::duration) {
        checkWhileWaiting_(rank);
        theirs.sleepers.fetch_add(1, std::memory_order_seq_cst);
        futexWait(&theirs.arrivals, seen);
        theirs.sleepers.fetch_sub(1, std::memory_order_seq_cst);
      });
}

std::atomic<uint64_t>& PeerSegments::published(int rank, size_t tile) const {
  return headerOf(*segments_[rank]).published[tile].value;
}

std::atomic<uint64_t>& PeerSegments::claimed(size_t tile) const {
  return headerOf(*segments_[0]).claimed[tile].value;
}

std::atomic<uint64_t>& PeerSegments::reduced(size_t tile) const {
  return headerOf(*segments_[0]).reduced[tile].value;
}

uint64_t PeerSegments::await(
    const std::atomic<uint64_t>& word,
    const std::function<bool(uint64_t)>& ready,
    const std::function<int(uint64_t)>& waitedOn) {
  SegmentHeader& group = headerOf(*segments_[0]);
  return pollUntil(word, ready, [&](uint64_t seen, std::chrono::steady_clock::duration waited) {
    checkWhileWaiting_(waitedOn(seen));
    if (waited < kYield) {
      std::this_thread::yield();
      return;
    }
    // Sequentially consistent with store(): either it sees this sleeper and
    // rings, or the look after registering sees its value.
    const uint32_t bell = group.bell.load(std::memory_order_seq_cst);
    group.bellSleepers.fetch_add(1, std::memory_order_seq_cst);
    if (!ready(word.load(std::memory_order_seq_cst))) {
      futexWait(&group.bell, bell);
    }
    group.bellSleepers.fetch_sub(1, std::memory_order_seq_cst);
  });
}

void PeerSegments::store(std::atomic<uint64_t>& word, uint64_t value) {
  word.store(value, std::memory_order_seq_cst);
  SegmentHeader& group = headerOf(*segments_[0]);
  if (group.bellSleepers.load(std::memory_order_seq_cst) > 0) {
    group.bell.fetch_add(1, std::memory_order_seq_cst);
    futexWakeAll(&group.bell);
  }
}

char* PeerSegments::poolBlock(int rank, const PoolSpan& span) {
  auto key = std::make_pair(rank, span.block);
  auto it = poolBlocks_.find(key);
  if (it == poolBlocks_.end()) {
    std::string error;
    auto block = SharedSegment::open(poolBlockName(static_cast<pid_t>(span.pid), span.block), span.blockBytes, &error);
    if (!block) {
      MONARCH_LOG(kWarn) << "rank " << rank_ << ": cannot map rank " << rank
                         << "'s pooled tensor, copying it through the slots: " << error;
      return nullptr;
    }
    it = poolBlocks_.emplace(key, std::move(block)).first;
  }
  return it->second->data() + span.offset;
}

} // namespace monarch
