#include "transport/channel_registry.h"

namespace monarch {

std::shared_ptr<Channel> ChannelRegistry::get(uint64_t id) {
  std::lock_guard<std::mutex> guard(mutex_);
  released_.erase(id);
  auto& channel = channels_[id];
  if (!channel) {
    channel = std::make_shared<Channel>(id);
  }
  return channel;
}

std::shared_ptr<Channel> ChannelRegistry::forIncoming(uint64_t id) {
  std::lock_guard<std::mutex> guard(mutex_);
  if (released_.count(id) != 0) {
    return nullptr;
  }
  auto& channel = channels_[id];
  if (!channel) {
    channel = std::make_shared<Channel>(id);
  }
  return channel;
}

void ChannelRegistry::release(uint64_t id) {
  std::lock_guard<std::mutex> guard(mutex_);
  channels_.erase(id);
  released_.insert(id);
}

bool ChannelRegistry::failed(uint64_t id, Status* why) {
  std::shared_ptr<Channel> channel;
  {
    std::lock_guard<std::mutex> guard(mutex_);
    auto it = channels_.find(id);
    if (it == channels_.end()) {
      return false;
    }
    channel = it->second;
  }
  return channel->errored(why);
}

size_t ChannelRegistry::size() {
  std::lock_guard<std::mutex> guard(mutex_);
  return channels_.size();
}

std::vector<std::shared_ptr<Channel>> ChannelRegistry::snapshot() {
  std::lock_guard<std::mutex> guard(mutex_);
  std::vector<std::shared_ptr<Channel>> channels;
  for (auto& entry : channels_) {
    channels.push_back(entry.second);
  }
  return channels;
}

void ChannelRegistry::peerFailed(Connection* connection, const std::string& reason) {
  for (auto& channel : snapshot()) {
    channel->peerFailed(connection, reason);
  }
}

void ChannelRegistry::peerDeparted(Connection* connection) {
  for (auto& channel : snapshot()) {
    channel->peerDeparted(connection);
  }
}

} // namespace monarch
