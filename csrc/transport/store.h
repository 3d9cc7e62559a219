#pragma once

#include <string>

namespace monarch {

// The rendezvous key-value store, as the transport needs it. The backend
// adapts torch's c10d::Store to this.
class KeyValueStore {
 public:
  virtual ~KeyValueStore() = default;
  virtual void set(const std::string& key, const std::string& value) = 0;
  // Blocks until the key exists (bounded by the store's own timeout).
  virtual std::string get(const std::string& key) = 0;
};

} // namespace monarch
