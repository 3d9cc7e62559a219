#include "backend/errors.h"

namespace monarch {

MonarchError::MonarchError(ErrorKind kind, std::vector<int> ranks, const std::string& message)
    : c10::DistBackendError({__func__, __FILE__, static_cast<uint32_t>(__LINE__)}, message),
      kind_(kind),
      ranks_(std::move(ranks)) {}

std::exception_ptr makeError(const Status& status) {
  return std::make_exception_ptr(MonarchError(status.kind, status.ranks, status.message));
}

} // namespace monarch
