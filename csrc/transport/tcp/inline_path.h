#pragma once

// Inline TCP: the payload follows its frame header on the link. Every link
// has it, last: it takes whatever the read paths leave, small payloads
// and everything between hosts without RDMA.

#include <atomic>

#include "transport/payload_path.h"

namespace monarch {

class InlinePath : public PayloadPath {
 public:
  static constexpr const char* kSentCounter = "tcp_sent";

  const char* name() const override {
    return "tcp";
  }
  uint8_t frameFlag() const override {
    return 0;
  }
  bool send(PathLink& link, const FrameHeader& header, const TransferPtr& transfer) override {
    bytesSent_ += transfer->bytes;
    link.sendInline(header, transfer);
    return true;
  }
  void addCounters(std::map<std::string, uint64_t>& into) const override {
    into[kSentCounter] += bytesSent_.load();
  }

 private:
  std::atomic<uint64_t> bytesSent_{0};
};

} // namespace monarch
