#include "transport/store_rendezvous.h"

#include <cstdio>
#include <random>
#include <stdexcept>

namespace monarch {

namespace {

std::string toHex(const uint8_t* bytes, size_t n) {
  static const char* kDigits = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < n; ++i) {
    out.push_back(kDigits[bytes[i] >> 4]);
    out.push_back(kDigits[bytes[i] & 0xf]);
  }
  return out;
}

bool fromHex(const std::string& text, uint8_t* bytes, size_t n) {
  if (text.size() != 2 * n) {
    return false;
  }
  for (size_t i = 0; i < n; ++i) {
    unsigned value = 0;
    if (std::sscanf(text.c_str() + 2 * i, "%2x", &value) != 1) {
      return false;
    }
    bytes[i] = static_cast<uint8_t>(value);
  }
  return true;
}

} // namespace

std::string StoreRendezvous::key(const std::string& what, int rank) const {
  std::string key = "monarch/" + std::to_string(group_.epoch) + "/" + what;
  return rank < 0 ? key : key + "/" + std::to_string(rank);
}

JobToken StoreRendezvous::token() {
  JobToken token;
  if (group_.rank == 0) {
    std::random_device device;
    for (auto& byte : token) {
      byte = static_cast<uint8_t>(device());
    }
    store_.set(key("token", -1), toHex(token.data(), token.size()));
  } else if (!fromHex(store_.get(key("token", -1)), token.data(), token.size())) {
    throw std::runtime_error("malformed job token in the rendezvous store");
  }
  return token;
}

void StoreRendezvous::publishEndpoint(uint64_t endpointId) {
  store_.set(key("endpoint", group_.rank), std::to_string(endpointId));
}

uint64_t StoreRendezvous::endpointOf(int rank) {
  return std::stoull(store_.get(key("endpoint", rank)));
}

std::set<int> StoreRendezvous::agreeOnReuse(const std::set<int>& candidates) {
  // Each rank publishes which peers it still holds a live link to; a link is
  // reused only when both ends list each other, so that no rank waits for a
  // dial its peer will not make.
  std::string reachable;
  for (int peer : candidates) {
    reachable += std::to_string(peer) + ",";
  }
  store_.set(key("reach", group_.rank), reachable);
  std::set<int> reused;
  const std::string me = "," + std::to_string(group_.rank) + ",";
  for (int peer : candidates) {
    if (("," + store_.get(key("reach", peer))).find(me) != std::string::npos) {
      reused.insert(peer);
    }
  }
  return reused;
}

void StoreRendezvous::publishAddress(const std::string& hostPort) {
  store_.set(key("addr", group_.rank), hostPort);
}

std::string StoreRendezvous::addressOf(int rank) {
  return store_.get(key("addr", rank));
}

} // namespace monarch
