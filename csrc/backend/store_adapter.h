#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include "transport/store.h"

namespace monarch {

// Lets the transport rendezvous through torch's c10d::Store.
class StoreAdapter : public KeyValueStore {
 public:
  explicit StoreAdapter(c10::intrusive_ptr<c10d::Store> store) : store_(std::move(store)) {}

  void set(const std::string& key, const std::string& value) override {
    store_->set(key, std::vector<uint8_t>(value.begin(), value.end()));
  }

  std::string get(const std::string& key) override {
    auto value = store_->get(key);
    return std::string(value.begin(), value.end());
  }

 private:
  c10::intrusive_ptr<c10d::Store> store_;
};

} // namespace monarch
