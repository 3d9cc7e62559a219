#pragma once

#include <string>

#include "gpu/compat.h"

namespace monarch::gpu {

// The GPU driver API, loaded with dlopen (libcuda.so.1, or libamdhip64.so on
// ROCm) so that the extension links against neither. Entry points have the
// same contract on both platforms; optional ones are null when the driver
// lacks them.
struct DriverApi {
  DriverStatus (*init)(unsigned int flags) = nullptr;
  DriverStatus (*driverGetVersion)(int* version) = nullptr;
  DriverStatus (*deviceGetCount)(int* count) = nullptr;
  DriverStatus (*getErrorString)(DriverStatus status, const char** text) = nullptr; // optional
  // (fd out, device address, bytes, handle type, flags); optional. The handle
  // type is an enum on both platforms, passed as its int value.
  DriverStatus (*memGetHandleForAddressRange)(void*, DevicePointer, size_t, int, unsigned long long) = nullptr;
};

class Driver {
 public:
  // The process-wide driver, loaded on first use (never throws).
  static const Driver& get();

  bool available() const {
    return available_;
  }
  const DriverApi& api() const {
    return api_;
  }
  const std::string& path() const {
    return path_;
  }
  // Why the driver is unavailable.
  const std::string& error() const {
    return error_;
  }
  // The driver's version as it reports it (e.g. 13000 for CUDA 13.0), or -1.
  int version() const {
    return version_;
  }
  // Devices the driver sees, or -1 with deviceError() saying why.
  int deviceCount() const {
    return deviceCount_;
  }
  const std::string& deviceError() const {
    return deviceError_;
  }
  std::string describe(DriverStatus status) const;

 private:
  Driver();

  DriverApi api_;
  bool available_ = false;
  std::string path_;
  std::string error_;
  int version_ = -1;
  int deviceCount_ = -1;
  std::string deviceError_;
};

} // namespace monarch::gpu
