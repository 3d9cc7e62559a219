#include "gpu/driver_api.h"

#include <cstdlib>

#include "common/logging.h"
#include "gpu/dynamic_library.h"

namespace monarch::gpu {

namespace {

template <typename Fn>
void bind(const DynamicLibrary& library, Fn*& slot, const char* name) {
  slot = reinterpret_cast<Fn*>(library.symbol(name));
}

std::string environment(const char* name) {
  const char* value = std::getenv(name);
  return value ? value : "";
}

} // namespace

const Driver& Driver::get() {
  static const Driver driver;
  return driver;
}

Driver::Driver() {
  // The driver is a system library: no wheel directory.
  auto library = DynamicLibrary::open(librarySearchOrder(kDriverLibrary, "", environment("MONARCH_DRIVER_LIBRARY")));
  if (!library.loaded()) {
    error_ = library.error();
    return;
  }
  path_ = library.path();
  bind(library, api_.init, kDriverSymbols.init);
  bind(library, api_.driverGetVersion, kDriverSymbols.driverGetVersion);
  bind(library, api_.deviceGetCount, kDriverSymbols.deviceGetCount);
  bind(library, api_.getErrorString, kDriverSymbols.getErrorString);
  bind(library, api_.memGetHandleForAddressRange, kDriverSymbols.memGetHandleForAddressRange);
  if (api_.init == nullptr || api_.driverGetVersion == nullptr || api_.deviceGetCount == nullptr) {
    error_ = path_ + " lacks the driver entry points " + kDriverSymbols.init + "/" + kDriverSymbols.driverGetVersion +
        "/" + kDriverSymbols.deviceGetCount;
    return;
  }
  available_ = true;
  if (api_.driverGetVersion(&version_) != kDriverSuccess) {
    version_ = -1;
  }
  // Initialising the driver is cheap and harmless without a device: it just
  // reports that there is none.
  DriverStatus status = api_.init(0);
  if (status == kDriverSuccess) {
    status = api_.deviceGetCount(&deviceCount_);
  }
  if (status != kDriverSuccess) {
    deviceCount_ = -1;
    deviceError_ = describe(status);
  }
  MONARCH_LOG(kDebug) << "GPU driver " << path_ << " version " << version_ << ", " << deviceCount_ << " device(s)";
}

std::string Driver::describe(DriverStatus status) const {
  const char* text = nullptr;
  if (api_.getErrorString != nullptr && api_.getErrorString(status, &text) == kDriverSuccess && text != nullptr) {
    return std::string(text) + " (" + std::to_string(static_cast<int>(status)) + ")";
  }
  return "driver error " + std::to_string(static_cast<int>(status));
}

} // namespace monarch::gpu
