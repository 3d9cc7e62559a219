#include "gpu/nccl_library.h"

#include <cstdlib>

#include "common/logging.h"
#include "gpu/compat.h"
#include "gpu/dynamic_library.h"

namespace monarch::gpu {

namespace {

// Binds `slot` to `name`; records the name in `missing` when a required
// symbol is absent.
template <typename Fn>
void bind(const DynamicLibrary& library, Fn*& slot, const char* name, std::string* missing) {
  slot = reinterpret_cast<Fn*>(library.symbol(name));
  if (slot == nullptr && missing != nullptr) {
    *missing += (missing->empty() ? "" : ", ") + std::string(name);
  }
}

} // namespace

const NcclLibrary& NcclLibrary::get() {
  static const NcclLibrary library;
  return library;
}

NcclLibrary::NcclLibrary() {
  const char* override = std::getenv("MONARCH_NCCL_LIBRARY");
  auto library = DynamicLibrary::open(
      librarySearchOrder(kCollectivesLibrary, kCollectivesWheelDir, override ? override : ""));
  if (!library.loaded()) {
    error_ = std::string(kCollectivesName) + " not found (" + library.error() + ")";
    return;
  }
  path_ = library.path();
  std::string missing;
  bind(library, api_.getVersion, "ncclGetVersion", &missing);
  bind(library, api_.getErrorString, "ncclGetErrorString", &missing);
  bind(library, api_.getLastError, "ncclGetLastError", nullptr);
  bind(library, api_.getUniqueId, "ncclGetUniqueId", &missing);
  bind(library, api_.commInitRankConfig, "ncclCommInitRankConfig", &missing);
  bind(library, api_.commGetAsyncError, "ncclCommGetAsyncError", &missing);
  bind(library, api_.commAbort, "ncclCommAbort", &missing);
  bind(library, api_.commDestroy, "ncclCommDestroy", &missing);
  bind(library, api_.commFinalize, "ncclCommFinalize", &missing);
  bind(library, api_.commShrink, "ncclCommShrink", nullptr);
  bind(library, api_.groupStart, "ncclGroupStart", &missing);
  bind(library, api_.groupEnd, "ncclGroupEnd", &missing);
  bind(library, api_.allReduce, "ncclAllReduce", &missing);
  bind(library, api_.broadcast, "ncclBroadcast", &missing);
  bind(library, api_.reduce, "ncclReduce", &missing);
  bind(library, api_.allGather, "ncclAllGather", &missing);
  bind(library, api_.reduceScatter, "ncclReduceScatter", &missing);
  bind(library, api_.send, "ncclSend", &missing);
  bind(library, api_.recv, "ncclRecv", &missing);
  bind(library, api_.redOpCreatePreMulSum, "ncclRedOpCreatePreMulSum", &missing);
  bind(library, api_.redOpDestroy, "ncclRedOpDestroy", &missing);
  if (api_.getVersion != nullptr && api_.getVersion(&version_) != ncclSuccess) {
    version_ = 0;
  }
  if (!missing.empty()) {
    // Non-blocking init and async error queries need NCCL 2.14 or newer.
    error_ = path_ + " (version " + version() + ") lacks " + missing;
    return;
  }
  available_ = true;
  MONARCH_LOG(kDebug) << kCollectivesName << " " << version() << " loaded from " << path_
                      << (hasShrink() ? " (has ncclCommShrink)" : "");
}

std::string NcclLibrary::version() const {
  if (version_ <= 0) {
    return "unknown";
  }
  // Codes since 2.9 are major*10000 + minor*100 + patch; older ones *1000.
  int major = version_ >= 20900 ? version_ / 10000 : version_ / 1000;
  int minor = version_ >= 20900 ? (version_ % 10000) / 100 : (version_ % 1000) / 100;
  int patch = version_ % 100;
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
}

std::string NcclLibrary::describe(ncclResult_t result, ncclComm_t comm) const {
  std::string text = api_.getErrorString != nullptr ? api_.getErrorString(result) : "error";
  text += " (" + std::string(kCollectivesName) + " error " + std::to_string(static_cast<int>(result)) + ")";
  if (api_.getLastError != nullptr) {
    const char* last = api_.getLastError(comm);
    if (last != nullptr && *last != '\0') {
      text += ": ";
      text += last;
    }
  }
  return text;
}

} // namespace monarch::gpu
