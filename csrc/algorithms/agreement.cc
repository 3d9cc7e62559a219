#include "algorithms/agreement.h"

#include "algorithms/chunks.h"

namespace monarch {

OpAgreement::OpAgreement(Links& links) : links_(links) {
  const int n = links.size();
  const int r = links.rank();
  // Rotated so that not every rank writes to rank 0 first.
  for (int distance = 1; distance < n; ++distance) {
    handles_.push_back(links.recv(wrapRank(r - distance, n), nullptr, 0));
  }
  for (int distance = 1; distance < n; ++distance) {
    handles_.push_back(links.send(wrapRank(r + distance, n), nullptr, 0));
  }
}

void OpAgreement::confirm() {
  for (Links::Handle handle : handles_) {
    links_.wait(handle);
  }
  handles_.clear();
}

} // namespace monarch
