#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "transport/rendezvous.h"

namespace monarch {

// What a reconfigure handle says about the endpoint of the process that made
// it: enough for a peer to dial it, to know it again (endpointId) and to tell
// whether it belongs to the same job. Its text form is one line of
// `key=value` fields after a versioned tag; it carries the job's
// fingerprint, never its token.
struct EndpointHandle {
  uint64_t jobFingerprint = 0;
  uint64_t endpointId = 0;
  std::string host;
  uint16_t port = 0;
  uint32_t pid = 0;
  uint64_t hostId = 0;

  std::string format() const;
  // Throws std::invalid_argument saying which field is missing or malformed.
  static EndpointHandle parse(const std::string& text);

  std::string address() const {
    return host + ":" + std::to_string(port);
  }
};

// The fingerprint of a job token that handles carry.
uint64_t jobFingerprint(const JobToken& token);
// The token of the job that `job` names (MONARCH_JOB): every process given
// the same name belongs to one job.
JobToken jobTokenOf(const std::string& job);

// A group's rendezvous read from its members' handles, in rank order: every
// endpoint already listens, so nothing is published and a refused dial means
// the process is gone. Each rank reuses the live links it holds to the
// members' endpoints; the group's first op (a barrier) confirms that both
// ends did.
class HandleRendezvous : public Rendezvous {
 public:
  HandleRendezvous(std::vector<EndpointHandle> members, const JobToken& token, std::chrono::milliseconds probeTimeout)
      : members_(std::move(members)), token_(token), probeTimeout_(probeTimeout) {}

  JobToken token() override {
    return token_;
  }
  void publishEndpoint(uint64_t /*endpointId*/) override {}
  uint64_t endpointOf(int rank) override {
    return members_.at(rank).endpointId;
  }
  std::set<int> agreeOnReuse(const std::set<int>& candidates) override {
    return candidates;
  }
  void publishAddress(const std::string& /*hostPort*/) override {}
  std::string addressOf(int rank) override {
    return members_.at(rank).address();
  }
  bool addressesListening() const override {
    return true;
  }
  // Whether nothing listens at `rank`'s address any more (one probe).
  bool gone(int rank) override;

 private:
  const std::vector<EndpointHandle> members_;
  const JobToken token_;
  const std::chrono::milliseconds probeTimeout_;
};

} // namespace monarch
