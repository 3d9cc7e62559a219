#pragma once

#include <nccl.h>

#include <string>

namespace monarch::gpu {

// Older nccl.h headers lack these; the library decides at run time.
#ifndef NCCL_SHRINK_ABORT
#define NCCL_SHRINK_ABORT 0x01
#endif

// The NCCL (RCCL on ROCm) entry points the backend calls, resolved with
// dlsym. The optional ones are null when the loaded library predates them.
struct NcclApi {
  ncclResult_t (*getVersion)(int*) = nullptr;
  const char* (*getErrorString)(ncclResult_t) = nullptr;
  const char* (*getLastError)(ncclComm_t) = nullptr; // optional (2.13)
  ncclResult_t (*getUniqueId)(ncclUniqueId*) = nullptr;
  ncclResult_t (*commInitRankConfig)(ncclComm_t*, int, ncclUniqueId, int, ncclConfig_t*) = nullptr;
  ncclResult_t (*commGetAsyncError)(ncclComm_t, ncclResult_t*) = nullptr;
  ncclResult_t (*commAbort)(ncclComm_t) = nullptr;
  ncclResult_t (*commDestroy)(ncclComm_t) = nullptr;
  ncclResult_t (*commFinalize)(ncclComm_t) = nullptr;
  // (comm, excluded ranks, count, new comm, config, flags); optional (2.27).
  ncclResult_t (*commShrink)(ncclComm_t, int*, int, ncclComm_t*, ncclConfig_t*, int) = nullptr;
  ncclResult_t (*groupStart)() = nullptr;
  ncclResult_t (*groupEnd)() = nullptr;
  ncclResult_t (*allReduce)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t) = nullptr;
  ncclResult_t (*broadcast)(const void*, void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t) = nullptr;
  ncclResult_t (*reduce)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, int, ncclComm_t, cudaStream_t) = nullptr;
  ncclResult_t (*allGather)(const void*, void*, size_t, ncclDataType_t, ncclComm_t, cudaStream_t) = nullptr;
  ncclResult_t (*reduceScatter)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t) =
      nullptr;
  ncclResult_t (*send)(const void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t) = nullptr;
  ncclResult_t (*recv)(void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t) = nullptr;
  ncclResult_t (*redOpCreatePreMulSum)(ncclRedOp_t*, void*, ncclDataType_t, ncclScalarResidence_t, ncclComm_t) = nullptr;
  ncclResult_t (*redOpDestroy)(ncclRedOp_t, ncclComm_t) = nullptr;
};

class NcclLibrary {
 public:
  // The process-wide library, loaded on first use (never throws). Search
  // order: MONARCH_NCCL_LIBRARY, the copy torch loaded, torch's lib
  // directory, pip's wheel directory, the default search path.
  static const NcclLibrary& get();

  bool available() const {
    return available_;
  }
  const NcclApi& api() const {
    return api_;
  }
  const std::string& path() const {
    return path_;
  }
  // Why the library is unavailable.
  const std::string& error() const {
    return error_;
  }
  // NCCL_VERSION_CODE of the loaded library (e.g. 22809), or 0.
  int versionCode() const {
    return version_;
  }
  // "2.28.9"
  std::string version() const;
  bool hasShrink() const {
    return api_.commShrink != nullptr;
  }
  // "unhandled system error (run with NCCL_DEBUG=INFO for details)", plus
  // the communicator's last error message when the library keeps one.
  std::string describe(ncclResult_t result, ncclComm_t comm = nullptr) const;

 private:
  NcclLibrary();

  NcclApi api_;
  bool available_ = false;
  std::string path_;
  std::string error_;
  int version_ = 0;
};

} // namespace monarch::gpu
