#include "transport/rdma/registration_cache.h"

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>

#include "common/logging.h"
#include "transport/rdma/libfabric.h"

namespace monarch::rdma {

std::atomic<size_t> RegistrationCache::openRegions_{0};

RegistrationCache::RegistrationCache(fid_domain* domain, fid_ep* endpoint, uint64_t mrMode)
    : domain_(domain), endpoint_(endpoint), mrMode_(mrMode) {}

RegistrationCache::~RegistrationCache() {
  clear();
}

void RegistrationCache::close(Entry& entry) {
  int rc = fi_close(&entry.mr->fid);
  if (rc != 0) {
    MONARCH_LOG(kWarn) << describe("fi_close(memory region)", rc);
  }
  --openRegions_;
}

bool RegistrationCache::acquire(
    void* data, size_t bytes, uint64_t access, const std::shared_ptr<void>& owner, Registration* out,
    std::string* error) {
  const auto begin = reinterpret_cast<uintptr_t>(data);
  const auto end = begin + bytes;
  std::lock_guard<std::mutex> guard(mutex_);
  for (auto it = entries_.begin(); it != entries_.end();) {
    if (it->owner.expired()) {
      close(*it);
      it = entries_.erase(it);
      continue;
    }
    if (it->begin <= begin && end <= it->end && (it->access & access) == access && !it->owner.owner_before(owner) &&
        !owner.owner_before(it->owner)) {
      out->desc = fi_mr_desc(it->mr);
      out->key = fi_mr_key(it->mr);
      out->remoteAddress = (mrMode_ & FI_MR_VIRT_ADDR) ? begin : begin - it->begin;
      return true;
    }
    ++it;
  }
  fid_mr* mr = nullptr;
  uint64_t requestedKey = (mrMode_ & FI_MR_PROV_KEY) ? 0 : nextKey_++;
  int rc = fi_mr_reg(domain_, data, bytes, access, 0, requestedKey, 0, &mr, nullptr);
  if (rc != 0) {
    *error = describe("fi_mr_reg", rc) + " registering " + std::to_string(bytes) + " bytes";
    return false;
  }
  ++openRegions_;
  Entry entry{begin, end, access, mr, owner};
  if (mrMode_ & FI_MR_ENDPOINT) {
    rc = fi_mr_bind(mr, &endpoint_->fid, 0);
    if (rc == 0) {
      rc = fi_mr_enable(mr);
    }
    if (rc != 0) {
      *error = describe("binding a memory region to the endpoint", rc);
      close(entry);
      return false;
    }
  }
  entries_.push_back(entry);
  out->desc = fi_mr_desc(mr);
  out->key = fi_mr_key(mr);
  out->remoteAddress = (mrMode_ & FI_MR_VIRT_ADDR) ? begin : 0;
  return true;
}

size_t RegistrationCache::sweep() {
  std::lock_guard<std::mutex> guard(mutex_);
  for (auto it = entries_.begin(); it != entries_.end();) {
    if (it->owner.expired()) {
      close(*it);
      it = entries_.erase(it);
    } else {
      ++it;
    }
  }
  return entries_.size();
}

void RegistrationCache::clear() {
  std::lock_guard<std::mutex> guard(mutex_);
  for (auto& entry : entries_) {
    close(entry);
  }
  entries_.clear();
}

} // namespace monarch::rdma
