#include "algorithms/shared_signature.h"

#include <atomic>

#include "algorithms/shared_slots.h"

namespace monarch {

namespace {

// Written by its owner only: the fields, then `seq` (release). Two per
// region, by the parity of the op's sequence number.
struct SignatureStamp {
  std::atomic<uint64_t> seq;
  uint64_t count;
  int32_t root;
  uint8_t op;
  uint8_t dtype;
  uint8_t reduceOp;
  uint8_t fits;
  BufferPlaces places; // where the owner's buffers lie (shared_direct.h, cross_memory_direct.h)
};
static_assert(sizeof(SignatureStamp) <= kStampBytes, "a stamp must fit its place");

SignatureStamp& stampOf(const SharedRegions& regions, int rank, uint64_t seq) {
  return *reinterpret_cast<SignatureStamp*>(stampsOf(regions, rank) + (seq % kStamps) * kStampBytes);
}

// The last op whose stamps its owner has read, every peer's.
std::atomic<uint64_t>& agreedOf(const SharedRegions& regions, int rank) {
  return *reinterpret_cast<std::atomic<uint64_t>*>(stampsOf(regions, rank) + kStamps * kStampBytes);
}

// The owner's answer in everyRankCan: the op's sequence number, shifted,
// with the answer in the low bit.
std::atomic<uint64_t>& answerOf(const SharedRegions& regions, int rank) {
  return *reinterpret_cast<std::atomic<uint64_t>*>(stampsOf(regions, rank) + (kStamps + 1) * kStampBytes);
}

} // namespace

bool agreeThroughSharedMemory(
    Links& links, SharedRegions& regions, bool fits, const BufferPlaces& places, std::vector<BufferPlaces>* everyRank) {
  const uint64_t seq = links.sequence();
  const int n = links.size();
  const int r = links.rank();
  const OpSignature& mine = links.signature();
  SignatureStamp& own = stampOf(regions, r, seq);
  // The stamp this one replaces must have been read by every peer. An op
  // that waits for every peer's data ensures it; one that leaves as soon
  // as it has its own (a gather's sender) does not, and a peer a few ops
  // behind would read this op's stamp in place of that one's.
  const uint64_t replaced = own.seq.load(std::memory_order_relaxed);
  if (replaced != 0) {
    for (int peer = 0; peer < n; ++peer) {
      if (peer != r) {
        regions.await(
            agreedOf(regions, peer), [replaced](uint64_t value) { return value >= replaced; },
            [peer](uint64_t) { return peer; });
      }
    }
  }
  own.count = mine.count;
  own.root = mine.root;
  own.op = static_cast<uint8_t>(mine.op);
  own.dtype = static_cast<uint8_t>(mine.dtype);
  own.reduceOp = mine.reduceOp;
  own.fits = fits ? 1 : 0;
  own.places = places;
  regions.store(own.seq, seq);
  if (everyRank) {
    everyRank->assign(n, BufferPlaces{});
    (*everyRank)[r] = places;
  }
  bool everyRankFits = fits;
  for (int peer = 0; peer < n; ++peer) {
    if (peer == r) {
      continue;
    }
    SignatureStamp& theirs = stampOf(regions, peer, seq);
    const uint64_t seen = regions.await(
        theirs.seq, [seq](uint64_t value) { return value >= seq; }, [peer](uint64_t) { return peer; });
    if (seen != seq) {
      links.failMismatch(peer, "had gone past this op without running it through shared memory");
    }
    const OpSignature got = signatureFrom(theirs);
    if (got != mine) {
      links.failMismatch(peer, "called " + got.describe());
    }
    everyRankFits = everyRankFits && theirs.fits != 0;
    if (everyRank) {
      (*everyRank)[peer] = theirs.places;
    }
  }
  regions.store(agreedOf(regions, r), seq);
  return everyRankFits;
}

bool everyRankCan(Links& links, SharedRegions& regions, bool can) {
  const uint64_t asked = links.sequence() << 1;
  regions.store(answerOf(regions, links.rank()), asked | (can ? 1 : 0));
  for (int peer = 0; peer < links.size(); ++peer) {
    if (peer != links.rank()) {
      // Every rank answers once per op, in sequence order: a later answer
      // cannot be there before this one is read, which the peer waits for.
      const uint64_t answer = regions.await(
          answerOf(regions, peer), [asked](uint64_t value) { return (value & ~uint64_t{1}) == asked; },
          [peer](uint64_t) { return peer; });
      can = can && (answer & 1) != 0;
    }
  }
  return can;
}

void meetForRound(Links& links, SharedRegions& regions, bool firstRound) {
  if (firstRound) {
    agreeThroughSharedMemory(links, regions);
  } else {
    regions.barrier();
  }
}

} // namespace monarch
