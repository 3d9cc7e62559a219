#pragma once

#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>

#include <exception>
#include <vector>

#include "common/status.h"

namespace monarch {

// The C++ side of torch_monarch's exceptions: a DistBackendError that also
// says what kind of failure it was and which group ranks it concerns.
class MonarchError : public c10::DistBackendError {
 public:
  MonarchError(ErrorKind kind, std::vector<int> ranks, const std::string& message);
  ErrorKind kind() const {
    return kind_;
  }
  const std::vector<int>& ranks() const {
    return ranks_;
  }

 private:
  ErrorKind kind_;
  std::vector<int> ranks_;
};

std::exception_ptr makeError(const Status& status);

// What c10d::Backend::getError() reports for a group broken by `status`.
c10d::ErrorType errorTypeOf(const Status& status);

} // namespace monarch
