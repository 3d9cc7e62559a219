#pragma once

// The platform names the GPU layer uses, in one place, so that no call site
// needs an #ifdef. The source is CUDA-flavoured; the ROCm build hipifies it
// (torch's tables plus hipify_rules/rules.json), which turns each name here
// into its HIP/RCCL counterpart: the file below is what the CUDA build sees,
// and build/hipified/csrc/gpu/compat_hip.h what the ROCm build sees.

#include <cuda.h>

namespace monarch::gpu {

// The platform the extension was built for: cuda, or rocm once hipified.
constexpr const char* kPlatform = "cuda";

// The collectives library: NCCL, or RCCL (same API, same symbol names).
constexpr const char* kCollectivesName = "NCCL";
constexpr const char* kCollectivesLibrary = "libnccl.so.2";
// Where pip installs it, relative to site-packages (empty: no such wheel;
// ROCm's torch wheels carry RCCL in torch/lib instead).
constexpr const char* kCollectivesWheelDir = "nvidia/nccl/lib";
constexpr const char* kCollectivesInstallHint = "pip install nvidia-nccl-cu13";

// The driver API. On ROCm it lives in the HIP runtime library itself.
constexpr const char* kDriverLibrary = "libcuda.so.1";
using DriverStatus = CUresult;
using DevicePointer = CUdeviceptr;
constexpr DriverStatus kDriverSuccess = CUDA_SUCCESS;

// Driver entry points, looked up by name with dlsym. Each has the same
// contract on both platforms (see driver_api.h).
struct DriverSymbols {
  const char* init;
  const char* driverGetVersion;
  const char* deviceGetCount;
  const char* getErrorString;
  // dma-buf export of device memory, for registering it with RDMA NICs.
  const char* memGetHandleForAddressRange;
};
constexpr DriverSymbols kDriverSymbols{
    "cuInit", "cuDriverGetVersion", "cuDeviceGetCount", "cuGetErrorString", "cuMemGetHandleForAddressRange"};

} // namespace monarch::gpu
