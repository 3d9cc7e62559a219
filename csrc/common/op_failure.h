#pragma once

#include <stdexcept>

#include "common/status.h"

namespace monarch {

// Thrown inside an op's execution to unwind it; the backend turns it into the
// op's error.
class OpFailure : public std::runtime_error {
 public:
  explicit OpFailure(Status status) : std::runtime_error(status.message), status_(std::move(status)) {}
  const Status& status() const {
    return status_;
  }

 private:
  Status status_;
};

} // namespace monarch
