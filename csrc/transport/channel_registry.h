#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "transport/channel.h"

namespace monarch {

// The channels (groups) multiplexed over one Fabric's connections.
class ChannelRegistry {
 public:
  // Creates the channel on first use: a peer may send before the local group
  // exists.
  std::shared_ptr<Channel> get(uint64_t id);
  // The channel an incoming frame goes to; null for a channel whose group was
  // destroyed, whose late frames are dropped.
  std::shared_ptr<Channel> forIncoming(uint64_t id);
  void release(uint64_t id);
  // Whether channel `id` exists and has failed; if so `why` is its failure.
  bool failed(uint64_t id, Status* why);
  // Channels registered now (diagnostics).
  size_t size();
  void peerFailed(Connection* connection, const std::string& reason);
  void peerDeparted(Connection* connection);

 private:
  std::vector<std::shared_ptr<Channel>> snapshot();

  std::mutex mutex_;
  std::unordered_map<uint64_t, std::shared_ptr<Channel>> channels_;
  std::unordered_set<uint64_t> released_;
};

} // namespace monarch
