#pragma once

#include <stdexcept>
#include <string>
#include <vector>

#include "transport/links.h"

namespace monarch {

// The links among some of a group's ranks, as a group of its own: rank i of
// the subgroup is `members[i]` of the parent. Transfers go through the
// parent's op, so an algorithm can run phases on different subgroups of one
// op (hierarchical.cc). A subgroup holding all of the parent's ranks on this
// host shares the parent's memory on it.
//
// Each phase of the op that goes through that memory is numbered (`phase`,
// below kPhasesPerOp) and counts as an op of its own there: the agreement
// of shared_signature.h, keyed by sequence(), then waits for every peer's
// stamp of this phase, with its buffers, rather than finding the last
// phase's stamps of the same op and taking their buffers for these.
class SubLinks : public Links {
 public:
  static constexpr uint64_t kPhasesPerOp = 2;

  SubLinks(Links& parent, std::vector<int> members, int rank, uint64_t phase = 0)
      : parent_(parent), members_(std::move(members)), rank_(rank), phase_(phase) {
    if (phase >= kPhasesPerOp) {
      throw std::logic_error("SubLinks: phase " + std::to_string(phase) + " of an op of " +
                             std::to_string(kPhasesPerOp));
    }
  }

  int rank() const override {
    return rank_;
  }
  int size() const override {
    return static_cast<int>(members_.size());
  }
  uint64_t hostOf(int rank) const override {
    return parent_.hostOf(members_[rank]);
  }
  Handle send(int peer, const void* data, size_t bytes) override {
    return parent_.send(members_[peer], data, bytes);
  }
  Handle recv(int peer, void* data, size_t bytes) override {
    return parent_.recv(members_[peer], data, bytes);
  }
  void wait(Handle handle) override {
    parent_.wait(handle);
  }
  void waitAll() override {
    parent_.waitAll();
  }
  uint64_t sequence() const override {
    return parent_.sequence() * kPhasesPerOp + phase_;
  }
  const OpSignature& signature() const override {
    return parent_.signature();
  }
  void announce(int peer, Announce when) override {
    parent_.announce(members_[peer], when);
  }
  [[noreturn]] void failMismatch(int peer, const std::string& how) override {
    parent_.failMismatch(members_[peer], how);
    throw std::logic_error("Links::failMismatch returned"); // it throws: [[noreturn]] is not inherited
  }
  void* workspace(size_t bytes, Workspace slot) override {
    return parent_.workspace(bytes, slot);
  }
  // The parent's, when this subgroup holds exactly the parent's ranks on
  // this host, in the same order (the regions are numbered that way).
  SharedRegions* hostRegions() override {
    std::vector<int> onThisHost;
    for (int rank : ranksOnThisHost()) {
      onThisHost.push_back(members_[rank]);
    }
    return onThisHost == parent_.ranksOnThisHost() ? parent_.hostRegions() : nullptr;
  }

 private:
  Links& parent_;
  const std::vector<int> members_;
  const int rank_;
  const uint64_t phase_;
};

} // namespace monarch
