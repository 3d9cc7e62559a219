#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "transport/socket.h"
#include "transport/store.h"

namespace monarch {

// Lets the transport rendezvous through torch's c10d::Store. A get waits for
// its key no later than `deadline` (the group's timeout), whatever the
// store's own timeout, so that a group that cannot form fails in time.
class StoreAdapter : public KeyValueStore {
 public:
  StoreAdapter(c10::intrusive_ptr<c10d::Store> store, Deadline deadline)
      : store_(std::move(store)), deadline_(deadline) {}

  void set(const std::string& key, const std::string& value) override {
    store_->set(key, std::vector<uint8_t>(value.begin(), value.end()));
  }

  std::string get(const std::string& key) override {
    auto left = std::max(
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - Clock::now()), std::chrono::milliseconds(1));
    try {
      store_->wait({key}, left);
    } catch (const c10::DistStoreError& e) {
      throw std::runtime_error(
          "rendezvous: Timed out after " + std::to_string(left.count()) + " ms waiting for store key '" + key +
          "' (" + e.what_without_backtrace() + ")");
    }
    auto value = store_->get(key);
    return std::string(value.begin(), value.end());
  }

 private:
  c10::intrusive_ptr<c10d::Store> store_;
  Deadline deadline_;
};

} // namespace monarch
