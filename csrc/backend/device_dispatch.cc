#include "backend/device_dispatch.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include <algorithm>

namespace monarch {

void DeviceDispatch::bind(gpu::DeviceGroup group) {
  // Keys of the device backend stay apart from the host transport's.
  if (group.store) {
    group.store = c10::make_intrusive<c10d::PrefixStore>("monarch_gpu", group.store);
  }
  std::lock_guard<std::mutex> guard(mutex_);
  group_ = std::move(group);
}

void DeviceDispatch::rebind(gpu::DeviceGroup group, const std::optional<std::vector<int64_t>>& left) {
  c10::intrusive_ptr<c10d::Backend> previous;
  {
    std::lock_guard<std::mutex> creating(createMutex_);
    std::lock_guard<std::mutex> guard(mutex_);
    previous = std::move(backend_);
    stopped_ = false;
    shrinks_ = 0;
  }
  c10::intrusive_ptr<c10d::Backend> shrunk;
  if (previous && left) {
    // SHRINK_ABORT: the previous membership's ops have failed, and those
    // who left may be dead.
    shrunk = gpu::shrinkDeviceBackend(*previous, group, *left, /*shrinkFlags=*/1);
  }
  if (previous) {
    previous->abort(); // its communicators span the previous membership
  }
  bind(std::move(group));
  std::lock_guard<std::mutex> guard(mutex_);
  backend_ = std::move(shrunk);
}

void DeviceDispatch::inheritShrunk(DeviceDispatch& parent, const std::vector<int64_t>& excluded, int shrinkFlags) {
  gpu::DeviceGroup child;
  c10::intrusive_ptr<c10d::Backend> parentBackend;
  {
    std::lock_guard<std::mutex> guard(parent.mutex_);
    child = gpu::shrunkGroup(parent.group_, excluded, ++parent.shrinks_);
    parentBackend = parent.backend_;
  }
  // Collective over the survivors when the parent has communicators.
  auto backend = parentBackend ? gpu::shrinkDeviceBackend(*parentBackend, child, excluded, shrinkFlags)
                               : c10::intrusive_ptr<c10d::Backend>();
  std::lock_guard<std::mutex> guard(mutex_);
  group_ = std::move(child);
  backend_ = std::move(backend);
}

void DeviceDispatch::inheritSplit(
    DeviceDispatch& parent,
    const c10::intrusive_ptr<c10d::Store>& store,
    const std::vector<int>& members,
    const std::string& name) {
  gpu::DeviceGroup child;
  {
    std::lock_guard<std::mutex> guard(parent.mutex_);
    child = parent.group_;
  }
  std::string key = "split/" + name;
  for (int rank : members) {
    key += "-" + std::to_string(rank);
  }
  auto self = std::find(members.begin(), members.end(), child.rank);
  child.rank = static_cast<int>(self - members.begin());
  child.size = static_cast<int>(members.size());
  child.name = child.name + "/" + key;
  if (store) {
    child.store = c10::make_intrusive<c10d::PrefixStore>("monarch_gpu", store);
  } else if (child.store) {
    child.store = c10::make_intrusive<c10d::PrefixStore>(key, child.store);
  }
  std::lock_guard<std::mutex> guard(mutex_);
  group_ = std::move(child);
}

bool DeviceDispatch::wants(const c10d::BarrierOptions& opts) const {
  if (opts.device.has_value()) {
    return opts.device->is_cuda();
  }
  return !opts.device_ids.empty();
}

bool DeviceDispatch::onDevice(const std::vector<at::Tensor>& tensors) {
  return std::any_of(tensors.begin(), tensors.end(), [](const at::Tensor& t) { return onDevice(t); });
}

bool DeviceDispatch::onDevice(const std::vector<std::vector<at::Tensor>>& lists) {
  return std::any_of(lists.begin(), lists.end(), [](const std::vector<at::Tensor>& l) { return onDevice(l); });
}

c10d::Backend& DeviceDispatch::get() {
  std::lock_guard<std::mutex> creating(createMutex_);
  gpu::DeviceGroup group;
  {
    std::lock_guard<std::mutex> guard(mutex_);
    if (backend_) {
      return *backend_;
    }
    group = group_;
  }
  // Outside mutex_: creation may wait for the peers (an op on the host
  // group), and abort() must stay able to take mutex_ meanwhile.
  auto backend = gpu::createDeviceBackend(std::move(group), *host_);
  std::lock_guard<std::mutex> guard(mutex_);
  backend_ = std::move(backend);
  if (stopped_) {
    backend_->abort(); // its ops fail with AbortedError, like the host path's
  }
  return *backend_;
}

std::string DeviceDispatch::backendName() {
  auto backend = current();
  return backend ? backend->getBackendName() : std::string();
}

c10::intrusive_ptr<c10d::Backend> DeviceDispatch::current() {
  std::lock_guard<std::mutex> guard(mutex_);
  return backend_;
}

uint64_t DeviceDispatch::collectivesPosted() {
  auto backend = current();
  return backend ? backend->getSequenceNumberForGroup() : 0;
}

void DeviceDispatch::setTimeout(std::chrono::milliseconds timeout) {
  std::lock_guard<std::mutex> guard(mutex_);
  group_.timeout = timeout;
  if (backend_) {
    backend_->setTimeout(timeout);
  }
}

c10d::ErrorType DeviceDispatch::error() {
  auto backend = current();
  return backend ? backend->getError() : c10d::ErrorType::SUCCESS;
}

void DeviceDispatch::abort() {
  c10::intrusive_ptr<c10d::Backend> backend;
  {
    std::lock_guard<std::mutex> guard(mutex_);
    stopped_ = true;
    backend = backend_;
  }
  if (backend) {
    backend->abort();
  }
}

void DeviceDispatch::shutdown() {
  c10::intrusive_ptr<c10d::Backend> backend;
  {
    std::lock_guard<std::mutex> guard(mutex_);
    stopped_ = true;
    backend = backend_;
  }
  if (backend) {
    backend->shutdown();
  }
}

} // namespace monarch
