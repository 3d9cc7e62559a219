#pragma once

// The CUDA event class. torch 2.9 moved it into c10 (at::cuda::CUDAEvent
// became an alias); its c10 header spares us ATen's CUDA context headers,
// which need the cuBLAS/cuSPARSE headers of a full toolkit.
#if __has_include(<c10/cuda/CUDAEvent.h>)
#include <c10/cuda/CUDAEvent.h>
namespace monarch::gpu {
using Event = c10::cuda::CUDAEvent;
} // namespace monarch::gpu
#else
#include <ATen/cuda/CUDAEvent.h>
namespace monarch::gpu {
using Event = at::cuda::CUDAEvent;
} // namespace monarch::gpu
#endif
