#pragma once

#include "transport/rendezvous.h"
#include "transport/store.h"

namespace monarch {

// A group's rendezvous through a key-value store: rank 0 draws the job token,
// every rank publishes its endpoint, the peers it still holds a live link to
// and its address under keys of the group's epoch.
class StoreRendezvous : public Rendezvous {
 public:
  StoreRendezvous(KeyValueStore& store, const GroupIdentity& group) : store_(store), group_(group) {}

  JobToken token() override;
  void publishEndpoint(uint64_t endpointId) override;
  uint64_t endpointOf(int rank) override;
  std::set<int> agreeOnReuse(const std::set<int>& candidates) override;
  void publishAddress(const std::string& hostPort) override;
  std::string addressOf(int rank) override;
  // A peer publishes its address before it accepts: a refused dial is retried.
  bool addressesListening() const override {
    return false;
  }

 private:
  std::string key(const std::string& what, int rank) const;

  KeyValueStore& store_;
  const GroupIdentity group_;
};

} // namespace monarch
