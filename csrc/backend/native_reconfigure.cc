// c10d's fault-tolerance contract (torch 2.14+): a group made with
// enable_reconfigure=True names its endpoint in a handle, and reconfigure()
// forms the group from the members' handles in place. The links come from
// the same Fabric::connectGroup that store-formed groups use: links to the
// same processes are kept and only new members connect.

#include "backend/monarch_backend.h"

#ifdef MONARCH_NATIVE_RECONFIGURE

#include <unistd.h>

#include <algorithm>
#include <set>
#include <variant>

#include "backend/store_adapter.h"
#include "common/logging.h"
#include "common/op_failure.h"
#include "contract/errors.h"
#include "contract/member_change.h"
#include "transport/handle_rendezvous.h"
#include "transport/store_rendezvous.h"

namespace monarch {

namespace {

// The handles in rank order: a list as given, a set sorted (the same order on
// every rank, whatever order each rank's set iterates in).
std::vector<std::string> handlesInRankOrder(const c10d::ReconfigureOptions& opts) {
  if (const auto* ordered = std::get_if<std::vector<c10d::ReconfigureHandle>>(&opts.handles)) {
    return *ordered;
  }
  const auto& unordered = std::get<std::unordered_set<c10d::ReconfigureHandle>>(opts.handles);
  std::vector<std::string> sorted(unordered.begin(), unordered.end());
  std::sort(sorted.begin(), sorted.end());
  return sorted;
}

std::string excerpt(const std::string& text) {
  return text.size() <= 80 ? text : text.substr(0, 77) + "...";
}

// The channel on which the members of `channelId` confirm it (confirm()).
uint64_t confirmationChannelOf(uint64_t channelId) {
  return fnv1a64("confirm", 7, channelId);
}

ErrorKind errorKindOf(RendezvousError::Cause cause) {
  return cause == RendezvousError::Cause::kTimeout ? ErrorKind::kTimeout : ErrorKind::kPeerFailure;
}

} // namespace

c10::intrusive_ptr<MonarchBackend> MonarchBackend::createReconfigurable(
    const c10::intrusive_ptr<c10d::Store>& store,
    int rank,
    int size,
    const std::string& groupName,
    BackendOptions options) {
  JobToken token;
  Membership membership;
  try {
    if (options.job.empty()) {
      // The creating group's ranks share a store: rank 0's token is the job's.
      StoreAdapter adapter(store, Clock::now() + options.timeout);
      StoreRendezvous rendezvous(adapter, GroupIdentity{fnv1a64(groupName.data(), groupName.size()), 0, rank, size});
      token = rendezvous.token();
    } else {
      token = jobTokenOf(options.job);
    }
    membership.fabric = std::make_shared<Fabric>(options.fabricOptions());
  } catch (const rdma::RdmaUnavailable&) {
    throw;
  } catch (const std::exception& e) {
    throw MonarchError(
        ErrorKind::kPeerFailure, {},
        "monarch: rank " + std::to_string(rank) + " could not create reconfigurable group '" + groupName + "': " + e.what());
  }
  // A group of one until the first reconfigure, on a channel of its own.
  uint64_t endpointId = membership.fabric->endpointId();
  membership.channelId = fnv1a64(&endpointId, sizeof(endpointId), fnv1a64(groupName.data(), groupName.size()));
  membership.connections.resize(1);
  std::string host = membership.fabric->listenHost();
  auto backend = c10::make_intrusive<MonarchBackend>(std::move(membership), options);
  backend->reconfigurable_ = std::make_unique<Reconfigurable>(Reconfigurable{token, groupName, {}, {}, {endpointId}});
  backend->device_.bind({nullptr, 0, 1, groupName + "/single", options.timeout, options.gpuTransport, host});
  MONARCH_LOG(kInfo) << "rank " << rank << "/" << size << " made reconfigurable group '" << groupName << "' at "
                     << backend->fabric_->listenAddress();
  return backend;
}

bool MonarchBackend::supportsReconfigure() const {
  return reconfigurable_ != nullptr;
}

c10d::ReconfigureHandle MonarchBackend::get_reconfigure_handle() const {
  TORCH_CHECK(
      reconfigurable_ != nullptr,
      "monarch: this group was not created with enable_reconfigure=True, so it has no reconfigure handle");
  EndpointHandle mine;
  mine.jobFingerprint = jobFingerprint(reconfigurable_->token);
  mine.endpointId = fabric_->endpointId();
  mine.host = fabric_->listenHost();
  mine.port = fabric_->listenPort();
  mine.pid = static_cast<uint32_t>(::getpid());
  mine.hostId = fabric_->hostId();
  return mine.format();
}

c10::intrusive_ptr<c10d::Work> MonarchBackend::reconfigure(const c10d::ReconfigureOptions& opts) {
  TORCH_CHECK(
      reconfigurable_ != nullptr,
      "monarch: reconfigure() needs a group created with enable_reconfigure=True "
      "(init_process_group or new_group(..., enable_reconfigure=True))");
  std::lock_guard<std::mutex> one(reconfigureMutex_);
  const std::string what = "monarch reconfigure (uuid " + std::to_string(opts.uuid) + ")";
  // Every check of the input comes before anything changes: bad input leaves
  // the group as it was, and does not use up the uuid.
  std::vector<std::string> handles = handlesInRankOrder(opts);
  TORCH_CHECK_VALUE(
      !handles.empty(), what, ": the handle list is empty; it must hold the handle of every member, this process's included");
  const uint64_t job = jobFingerprint(reconfigurable_->token);
  std::vector<EndpointHandle> members;
  std::set<uint64_t> endpoints;
  int rank = -1;
  for (size_t i = 0; i < handles.size(); ++i) {
    EndpointHandle member;
    try {
      member = EndpointHandle::parse(handles[i]);
    } catch (const std::invalid_argument& e) {
      TORCH_CHECK_VALUE(false, what, ": handle ", i, " is malformed: ", e.what(), " (handle: '", excerpt(handles[i]), "')");
    }
    TORCH_CHECK_VALUE(
        member.jobFingerprint == job, what, ": handle ", i, " (pid ", member.pid, " at ", member.address(),
        ") belongs to another job; every member must come from this job (processes of one job share MONARCH_JOB, "
        "or the store of the group that created them)");
    TORCH_CHECK_VALUE(
        endpoints.insert(member.endpointId).second, what, ": handle ", i, " (pid ", member.pid, " at ", member.address(),
        ") appears twice");
    if (member.endpointId == fabric_->endpointId()) {
      rank = static_cast<int>(i);
    }
    members.push_back(std::move(member));
  }
  TORCH_CHECK_VALUE(
      rank >= 0, what, ": this process's handle (", get_reconfigure_handle(), ") is not among the ", handles.size(),
      " handles");
  TORCH_CHECK(
      reconfigurable_->usedUuids.insert(opts.uuid).second, what, ": uuid ", opts.uuid,
      " was already used on this group; every reconfigure needs a fresh uuid");

  releaseUnconfirmed();
  auto timeout = opts.timeout.value_or(std::chrono::milliseconds(timeoutMs_.load()));
  auto deadline = Clock::now() + timeout;
  // The same on every member: the uuid and the members, in rank order (not
  // the local group's name, which members made apart need not share; the
  // handles name endpoints of this group alone).
  std::string identity = "reconfigure/" + std::to_string(opts.uuid);
  for (const auto& handle : handles) {
    identity += "\n" + handle;
  }
  Membership membership;
  membership.fabric = fabric_;
  membership.rank = rank;
  membership.channelId = fnv1a64(identity.data(), identity.size());
  GroupIdentity group{membership.channelId, kHandleEpoch, rank, static_cast<int>(members.size())};
  auto describe = [&](const std::vector<int>& ranks) {
    std::string text;
    for (int peer : ranks) {
      text += (text.empty() ? "" : ", ") + std::string("rank ") + std::to_string(peer) + " (pid " +
          std::to_string(members[peer].pid) + " at " + members[peer].address() + ")";
    }
    return text;
  };
  try {
    HandleRendezvous rendezvous(members, reconfigurable_->token, std::min(options_.heartbeatTimeout / 5, timeout));
    membership.connections = fabric_->connectGroup(rendezvous, group, deadline);
  } catch (const RendezvousError& e) {
    throw MonarchError(
        errorKindOf(e.cause), e.ranks,
        what + ": rank " + std::to_string(rank) + " of " + std::to_string(members.size()) + " could not form the group" +
            (e.ranks.empty() ? std::string() : " with " + describe(e.ranks)) + " within " +
            std::to_string(timeout.count()) + " ms: " + e.what());
  }
  Status unconfirmed = confirm(membership, deadline);
  if (!unconfirmed.ok()) {
    reconfigurable_->unconfirmed.push_back(confirmationChannelOf(membership.channelId));
    throw MonarchError(
        unconfirmed.kind, unconfirmed.ranks,
        what + ": rank " + std::to_string(rank) + " of " + std::to_string(members.size()) +
            ": the group formed but did not confirm" +
            (unconfirmed.ranks.empty() ? std::string() : " with " + describe(unconfirmed.ranks)) + ": " +
            unconfirmed.message);
  }
  rebind(std::move(membership), opts.uuid);
  std::vector<uint64_t> memberEndpoints;
  for (const auto& member : members) {
    memberEndpoints.push_back(member.endpointId);
  }
  device_.rebind(
      {nullptr, rank, static_cast<int>(members.size()), reconfigurable_->groupName + "/" + std::to_string(opts.uuid),
       std::chrono::milliseconds(timeoutMs_.load()), options_.gpuTransport, fabric_->listenHost()},
      gpu::membersThatLeft(reconfigurable_->members, memberEndpoints));
  reconfigurable_->members = std::move(memberEndpoints);
  MONARCH_LOG(kInfo) << what << ": rank " << rank << " of " << members.size() << ", "
                     << fabric_->connectionCount() << " live connections on the endpoint";
  auto work = c10::make_intrusive<MonarchWork>(rank, c10d::OpType::UNKNOWN, 0, std::vector<at::Tensor>(), timeout);
  work->markSuccess();
  return work;
}

Status MonarchBackend::confirm(const Membership& membership, Deadline deadline) {
  // A link one end reuses may be one the other end has dropped: only an op
  // that every member completes shows that all hold the same links. It runs
  // on a channel of its own: a member that confirmed may use (or abort) the
  // group while others still wait for their last confirming message.
  std::atomic<bool> never{false};
  const uint64_t confirmId = confirmationChannelOf(membership.channelId);
  auto channel = fabric_->channels().get(confirmId);
  GroupLinks links(
      membership.rank, fabric_->hostId(), fabric_->endpointId(), 0, membership.connections, channel,
      std::make_shared<CompletionSignal>(), &never);
  OpSignature signature;
  signature.op = OpCode::kBarrier;
  Status status;
  links.beginOp(1, signature, deadline, nullptr);
  try {
    ::monarch::barrier(links);
  } catch (const OpFailure& failure) {
    status = failure.status();
  }
  links.endOp(status.ok());
  if (status.ok()) {
    // Every message of the barrier to this rank has come: nothing more arrives on it.
    fabric_->channels().release(confirmId);
    return status;
  }
  // Its channel stays registered until the next reconfigure (releaseUnconfirmed).
  if (status.kind == ErrorKind::kTimeout) {
    auto asked = Clock::now() + std::min(options_.heartbeatTimeout / 2, std::chrono::milliseconds(1000));
    status.ranks = channel->ranksBehind(1, asked);
    status.message = "ranks " + formatRanks(status.ranks) + " did not confirm it in time (" + status.message + ")";
  }
  // The members still waiting learn it now. The channel stays registered, so
  // that it goes on answering their questions about who started it.
  channel->fail(status, /*tellPeers=*/true);
  return status;
}

void MonarchBackend::rebind(Membership membership, int64_t uuid) {
  // Not while abort() or shutdown() (from any thread) retires the current one.
  std::lock_guard<std::mutex> changing(membershipMutex_);
  // A slower peer may still be in the last op this rank finished here: it
  // finishes it, and fails at its next (Channel::leave).
  retire(
      Status::error(
          ErrorKind::kAborted, {},
          "the group was reconfigured (uuid " + std::to_string(uuid) + ") on rank " + std::to_string(rank_)),
      /*leaving=*/true);
  {
    // c10d reads them without a lock (getRank()); the ops of this backend read them under mutex_.
    std::lock_guard<std::mutex> guard(mutex_);
    rank_ = membership.rank;
    size_ = static_cast<int>(membership.connections.size());
  }
  attach(std::move(membership));
}

void MonarchBackend::releaseUnconfirmed() {
  // The members of a failed reconfigure learnt it from the failure notice
  // (confirm()) and have given it up by the time of the next one.
  for (uint64_t channel : reconfigurable_->unconfirmed) {
    fabric_->channels().release(channel);
  }
  reconfigurable_->unconfirmed.clear();
}

} // namespace monarch

#endif // MONARCH_NATIVE_RECONFIGURE
