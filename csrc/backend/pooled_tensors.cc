// MonarchBackend::supportsTensorAlloc and allocateTensor: CPU tensors from
// the process's SharedTensorPool.

#include <ATen/ATen.h>

#include <string>

#include "backend/monarch_backend.h"
#include "common/logging.h"
#include "transport/shm/tensor_pool.h"

namespace monarch {

bool MonarchBackend::supportsTensorAlloc(c10::DeviceIndex deviceIdx) {
  return deviceIdx < 0;
}

at::Tensor MonarchBackend::allocateTensor(long size, at::TensorOptions options) {
  TORCH_CHECK_VALUE(
      options.device().is_cpu(), "monarch's allocate_tensor gives CPU tensors in shared memory, not ",
      options.device().str(), " ones: allocate those with torch.empty");
  TORCH_CHECK_VALUE(size >= 0, "allocate_tensor of a negative size (", size, ")");
  const size_t bytes = static_cast<size_t>(size) * c10::elementSize(c10::typeMetaToScalarType(options.dtype()));
  std::string error;
  void* data = SharedTensorPool::instance().allocate(bytes, &error);
  if (!data) {
    // Collectives on an ordinary tensor copy through the slots: slower, the same result.
    static bool warned = false;
    if (!warned) {
      warned = true;
      MONARCH_LOG(kWarn) << "allocate_tensor: no shared memory for " << bytes
                         << " bytes, using ordinary memory (collectives copy it through the slots): " << error;
    }
    return at::empty({size}, options);
  }
  return at::from_blob(
      data, {size}, [](void* block) { SharedTensorPool::instance().release(block); }, options.device(at::kCPU));
}

} // namespace monarch
