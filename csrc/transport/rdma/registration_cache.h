#pragma once

// Memory registrations of the buffers a collective moves by RDMA. Every
// chunk of a tensor that a ring or a pairwise exchange sends shares one
// registration. An entry lives only while the owner of its memory (the op's
// keepalive: its tensors and buffers) does: once the owner is gone the
// address may come back mapping other pages, which a registration pinned by
// a NIC would not follow. Across ops the providers' own caches (verbs and
// efa watch munmap) make registering the same tensor again cheap.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

struct fid_domain;
struct fid_ep;
struct fid_mr;

namespace monarch::rdma {

struct Registration {
  void* desc = nullptr; // local descriptor, for FI_MR_LOCAL providers
  uint64_t key = 0; // what a peer names the region by
  uint64_t remoteAddress = 0; // what a peer reads at, for the registered address
};

class RegistrationCache {
 public:
  // `mrMode` is the domain's FI_MR_* mode; `endpoint` is what regions are
  // bound to when it has FI_MR_ENDPOINT.
  RegistrationCache(fid_domain* domain, fid_ep* endpoint, uint64_t mrMode);
  ~RegistrationCache();

  // A registration covering [data, data + bytes) with `access` (FI_READ,
  // FI_REMOTE_READ) that lives while `owner` does. False with `error` set
  // when the provider refuses.
  bool acquire(
      void* data, size_t bytes, uint64_t access, const std::shared_ptr<void>& owner, Registration* out,
      std::string* error);
  // Closes the regions whose owner is gone; returns how many stay open.
  size_t sweep();
  // Closes every region (endpoint shutdown).
  void clear();

  // Regions open in this process, over every cache (leak checks).
  static size_t openRegions() {
    return openRegions_.load();
  }

 private:
  struct Entry {
    uintptr_t begin;
    uintptr_t end;
    uint64_t access;
    fid_mr* mr;
    std::weak_ptr<void> owner;
  };
  static void close(Entry& entry);

  fid_domain* const domain_;
  fid_ep* const endpoint_;
  const uint64_t mrMode_;
  std::mutex mutex_;
  std::vector<Entry> entries_;
  uint64_t nextKey_ = 1; // keys we choose when the provider does not (no FI_MR_PROV_KEY)
  static std::atomic<size_t> openRegions_;
};

} // namespace monarch::rdma
