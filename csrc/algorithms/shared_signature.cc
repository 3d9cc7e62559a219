#include "algorithms/shared_signature.h"

#include <atomic>

#include "algorithms/shared_slots.h"

namespace monarch {

namespace {

// Written by its owner only: the fields, then `seq` (release). Two per
// region, by the parity of the op's sequence number: a rank writes the
// stamp of op s + 2 only once it has finished op s + 1, for which its
// peers had to finish reading the stamps of op s.
struct SignatureStamp {
  std::atomic<uint64_t> seq;
  uint64_t count;
  int32_t root;
  uint8_t op;
  uint8_t dtype;
  uint8_t reduceOp;
};
static_assert(sizeof(SignatureStamp) <= kStampBytes, "a stamp must fit its place");

SignatureStamp& stampOf(const SharedRegions& regions, int rank, uint64_t seq) {
  return *reinterpret_cast<SignatureStamp*>(stampsOf(regions, rank) + (seq % kStamps) * kStampBytes);
}

} // namespace

void agreeThroughSharedMemory(Links& links, SharedRegions& regions) {
  const uint64_t seq = links.sequence();
  const OpSignature& mine = links.signature();
  SignatureStamp& own = stampOf(regions, links.rank(), seq);
  own.count = mine.count;
  own.root = mine.root;
  own.op = static_cast<uint8_t>(mine.op);
  own.dtype = static_cast<uint8_t>(mine.dtype);
  own.reduceOp = mine.reduceOp;
  own.seq.store(seq, std::memory_order_release);
  for (int peer = 0; peer < links.size(); ++peer) {
    if (peer == links.rank()) {
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
  }
}

} // namespace monarch
