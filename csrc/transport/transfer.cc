#include "transport/transfer.h"

namespace monarch {

void Transfer::complete(Status result, int fromRank) {
  {
    std::lock_guard<std::mutex> guard(signal->mutex);
    if (done) {
      return;
    }
    done = true;
    status = std::move(result);
    sourceRank = fromRank;
  }
  signal->cv.notify_all();
  if (onComplete) {
    onComplete(status, sourceRank);
  }
}

bool Transfer::isDone() {
  std::lock_guard<std::mutex> guard(signal->mutex);
  return done;
}

} // namespace monarch
