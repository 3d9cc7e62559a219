#include "contract/errors.h"

namespace monarch {

MonarchError::MonarchError(ErrorKind kind, std::vector<int> ranks, const std::string& message)
    : c10::DistBackendError({__func__, __FILE__, static_cast<uint32_t>(__LINE__)}, message),
      kind_(kind),
      ranks_(std::move(ranks)) {}

std::exception_ptr makeError(const Status& status) {
  return std::make_exception_ptr(MonarchError(status.kind, status.ranks, status.message));
}

c10d::ErrorType errorTypeOf(const Status& status) {
  switch (status.kind) {
    case ErrorKind::kNone:
      return c10d::ErrorType::SUCCESS;
    case ErrorKind::kTimeout:
      return c10d::ErrorType::TIMEOUT;
    case ErrorKind::kPeerFailure:
      return c10d::ErrorType::REMOTE_ERROR;
    default:
      return c10d::ErrorType::COMM_ERROR;
  }
}

} // namespace monarch
