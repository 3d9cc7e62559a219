#include "transport/rdma/rdma_endpoint.h"

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

#include "common/logging.h"
#include "transport/rdma/libfabric.h"

namespace monarch::rdma {

namespace {

// Largest piece one fi_read moves; bigger reads are split so that the
// provider's queue holds several and one slow piece does not hold all.
constexpr size_t kMaxPieceBytes = 8 * 1024 * 1024;
// How long the progress thread sleeps between empty polls while reads are
// in flight or regions are exposed (a software provider such as tcp moves
// bytes only when polled, on both sides).
constexpr auto kPollInterval = std::chrono::microseconds(20);
// How often it closes the registrations whose owner is gone.
constexpr auto kSweepInterval = std::chrono::milliseconds(20);
// How long it waits with nothing to do before looking again.
constexpr auto kIdleWait = std::chrono::milliseconds(100);

void check(int rc, const char* what) {
  if (rc != 0) {
    throw RdmaUnavailable(describe(what, rc));
  }
}

} // namespace

struct RdmaEndpoint::Read {
  PeerAddress peer;
  char* dest;
  size_t bytes;
  uint64_t remoteAddress;
  uint64_t key;
  Registration local;
  std::shared_ptr<void> owner; // keeps `dest` alive while the provider may write it
  const void* token;
  ReadDone done; // empty once called
  std::chrono::steady_clock::time_point lastProgress = std::chrono::steady_clock::now();
  size_t posted = 0; // bytes of pieces handed to the provider
  size_t inFlight = 0; // pieces the provider holds
  size_t completed = 0; // bytes read
  std::string error;
};

struct RdmaEndpoint::Piece {
  fi_context2 context; // first: libfabric's scratch space
  Read* read;
  size_t bytes;
};

std::atomic<size_t> RdmaEndpoint::openEndpoints_{0};

std::shared_ptr<RdmaEndpoint> RdmaEndpoint::open(const std::string& provider, std::chrono::milliseconds stallBound) {
  const LibFabric& lib = libfabric();
  if (!lib.loaded) {
    throw RdmaUnavailable(lib.error);
  }
  std::vector<std::string> candidates;
  if (provider.empty()) {
    candidates.assign(std::begin(kDefaultProviders), std::end(kDefaultProviders));
  } else {
    candidates.push_back(provider);
  }
  std::string tried;
  for (const auto& name : candidates) {
    fi_info* hints = lib.dupinfo(nullptr);
    hints->caps = FI_RMA | FI_READ | FI_REMOTE_READ;
    hints->ep_attr->type = FI_EP_RDM;
    hints->domain_attr->threading = FI_THREAD_SAFE;
    // Every mode this code honours: local descriptors, virtual addresses,
    // provider keys and regions bound to the endpoint.
    hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT;
    hints->fabric_attr->prov_name = ::strdup(name.c_str()); // freed by fi_freeinfo
    fi_info* found = nullptr;
    int rc = lib.getinfo(kApiVersion, nullptr, nullptr, 0, hints, &found);
    lib.freeinfo(hints);
    if (rc != 0 || found == nullptr) {
      tried += (tried.empty() ? "" : "; ") + name + ": " + (rc == -FI_ENODATA ? "not available here" : describe("fi_getinfo", rc));
      continue;
    }
    std::shared_ptr<RdmaEndpoint> endpoint(new RdmaEndpoint());
    endpoint->stallBound_ = stallBound;
    endpoint->info_ = lib.dupinfo(found);
    lib.freeinfo(found);
    endpoint->openWith(endpoint->info_);
    return endpoint;
  }
  throw RdmaUnavailable(
      "no libfabric provider offers reliable datagrams with RMA reads (" + tried +
      "); on RDMA hardware install its provider (verbs: rdma-core, efa: the EFA installer), or name one with "
      "Options.rdma_provider (fi_info lists them)");
}

void RdmaEndpoint::openWith(fi_info* info) {
  provider_ = info->fabric_attr->prov_name ? info->fabric_attr->prov_name : "";
  check(libfabric().fabric(info->fabric_attr, &fabric_, nullptr), "fi_fabric");
  check(fi_domain(fabric_, info, &domain_, nullptr), "fi_domain");
  fi_av_attr avAttr{};
  avAttr.type = FI_AV_UNSPEC;
  check(fi_av_open(domain_, &avAttr, &av_, nullptr), "fi_av_open");
  fi_cq_attr cqAttr{};
  cqAttr.format = FI_CQ_FORMAT_CONTEXT;
  cqAttr.wait_obj = FI_WAIT_NONE;
  check(fi_cq_open(domain_, &cqAttr, &cq_, nullptr), "fi_cq_open");
  check(fi_endpoint(domain_, info, &ep_, nullptr), "fi_endpoint");
  check(fi_ep_bind(ep_, &av_->fid, 0), "fi_ep_bind(address vector)");
  check(fi_ep_bind(ep_, &cq_->fid, FI_TRANSMIT | FI_RECV), "fi_ep_bind(completion queue)");
  check(fi_enable(ep_), "fi_enable");
  size_t length = 0;
  fi_getname(&ep_->fid, nullptr, &length); // -FI_ETOOSMALL, with the length
  address_.resize(length);
  check(fi_getname(&ep_->fid, address_.data(), &length), "fi_getname");
  address_.resize(length);
  registrations_ = std::make_unique<RegistrationCache>(domain_, ep_, info->domain_attr->mr_mode);
  maxPiece_ = std::min<size_t>(kMaxPieceBytes, info->ep_attr->max_msg_size);
  ++openEndpoints_;
  progress_ = std::thread([this] { progressLoop(); });
  MONARCH_LOG(kInfo) << "rdma endpoint on provider " << provider_ << ", domain "
                     << (info->domain_attr->name ? info->domain_attr->name : "?");
}

RdmaEndpoint::~RdmaEndpoint() {
  shutdown();
}

bool RdmaEndpoint::addPeer(const std::string& address, PeerAddress* peer, std::string* error) {
  if (address.size() != address_.size()) {
    *error = "peer address of " + std::to_string(address.size()) + " bytes, expected " + std::to_string(address_.size());
    return false;
  }
  std::lock_guard<std::mutex> guard(mutex_);
  if (stopping_) {
    *error = "rdma endpoint shut down";
    return false;
  }
  int inserted = fi_av_insert(av_, address.data(), 1, peer, 0, nullptr);
  if (inserted != 1) {
    *error = describe("fi_av_insert", inserted < 0 ? inserted : -FI_EINVAL);
    return false;
  }
  return true;
}

bool RdmaEndpoint::expose(
    void* data, size_t bytes, const std::shared_ptr<void>& owner, Registration* out, std::string* error) {
  {
    // Under the lock: shutdown() closes the domain under it too.
    std::lock_guard<std::mutex> guard(mutex_);
    if (stopping_) {
      *error = "rdma endpoint shut down";
      return false;
    }
    if (!registrations_->acquire(data, bytes, FI_REMOTE_READ, owner, out, error)) {
      return false;
    }
  }
  exposed_ = true;
  wake_.notify_one(); // a software provider serves the peer's read only while polled
  return true;
}

void RdmaEndpoint::read(
    PeerAddress peer, void* dest, size_t bytes, uint64_t remoteAddress, uint64_t key, std::shared_ptr<void> owner,
    const void* token, ReadDone done) {
  std::string error = "rdma endpoint shut down";
  {
    std::lock_guard<std::mutex> guard(mutex_);
    Registration local;
    if (!stopping_ &&
        (!(info_->domain_attr->mr_mode & FI_MR_LOCAL) ||
         registrations_->acquire(dest, bytes, FI_READ, owner, &local, &error))) {
      reads_.push_back(Read{peer, static_cast<char*>(dest), bytes, remoteAddress, key, local, std::move(owner), token,
                            std::move(done)});
      queued_.push_back(&reads_.back());
      wake_.notify_one();
      return;
    }
  }
  done(error);
}

bool RdmaEndpoint::postPieces() {
  std::vector<std::function<void()>> calls;
  bool room = true;
  {
    std::lock_guard<std::mutex> guard(mutex_);
    while (!queued_.empty() && room) {
      Read* read = queued_.front();
      while (read->posted < read->bytes) {
        size_t size = std::min(maxPiece_, read->bytes - read->posted);
        auto* piece = new Piece{{}, read, size};
        ssize_t rc = fi_read(
            ep_, read->dest + read->posted, size, read->local.desc, read->peer, read->remoteAddress + read->posted,
            read->key, &piece->context);
        if (rc == -FI_EAGAIN) {
          delete piece; // the provider's queue is full: poll, then retry
          room = false;
          break;
        }
        if (rc != 0) {
          delete piece;
          read->error = describe("fi_read", static_cast<int>(rc));
          read->posted = read->bytes; // post no more of it
          break;
        }
        pieces_.insert(piece);
        read->posted += size;
        ++read->inFlight;
      }
      if (read->posted == read->bytes) {
        queued_.pop_front();
        if (!read->error.empty() && read->inFlight == 0) {
          finishLocked(read, read->error, &calls);
        }
      }
    }
  }
  for (auto& call : calls) {
    call();
  }
  return room;
}

void RdmaEndpoint::onPiece(Piece* piece, const std::string& error) {
  std::vector<std::function<void()>> calls;
  {
    std::lock_guard<std::mutex> guard(mutex_);
    if (pieces_.erase(piece) == 0) {
      // Not a context we gave the provider: never touch it.
      MONARCH_LOG(kError) << "rdma: completion for an operation this endpoint did not post (ignored)";
      return;
    }
    Read* read = piece->read;
    read->lastProgress = std::chrono::steady_clock::now();
    if (error.empty()) {
      read->completed += piece->bytes;
    } else if (read->error.empty()) {
      read->error = error;
    }
    delete piece;
    --read->inFlight;
    if (!read->error.empty() && read->posted < read->bytes) {
      // A failed piece: post no more, and stop waiting to.
      read->posted = read->bytes;
      queued_.erase(std::remove(queued_.begin(), queued_.end(), read), queued_.end());
    }
    if (read->inFlight == 0 && read->posted == read->bytes) {
      std::string outcome = read->error;
      if (outcome.empty() && read->completed != read->bytes) {
        outcome = "read " + std::to_string(read->completed) + " of " + std::to_string(read->bytes) + " bytes";
      }
      finishLocked(read, outcome, &calls);
    }
  }
  for (auto& call : calls) {
    call();
  }
}

void RdmaEndpoint::finishLocked(Read* read, std::string error, std::vector<std::function<void()>>* calls) {
  if (read->done) {
    calls->push_back([done = std::move(read->done), error = std::move(error)] { done(error); });
    read->done = nullptr;
  }
  if (read->inFlight == 0 && read->posted == read->bytes) {
    reads_.remove_if([read](const Read& r) { return &r == read; });
  }
}

void RdmaEndpoint::failStalledReads(std::chrono::steady_clock::time_point now) {
  std::lock_guard<std::mutex> guard(mutex_);
  for (auto& read : reads_) {
    if (read.error.empty() && read.inFlight > 0 && now - read.lastProgress > stallBound_) {
      // Fails once the provider hands every piece back (onPiece): only then
      // may the payload come another way, with nothing left to write late.
      read.error = "no completion for " + std::to_string(stallBound_.count()) + " ms";
      read.posted = read.bytes;
      queued_.erase(std::remove(queued_.begin(), queued_.end(), &read), queued_.end());
      for (Piece* piece : pieces_) {
        if (piece->read == &read) {
          fi_cancel(&ep_->fid, &piece->context);
        }
      }
    }
  }
}

void RdmaEndpoint::cancelReads(const void* token, const std::string& why) {
  std::vector<std::function<void()>> calls;
  {
    std::lock_guard<std::mutex> guard(mutex_);
    std::vector<Read*> mine;
    for (auto& read : reads_) {
      if (read.token == token) {
        mine.push_back(&read);
      }
    }
    for (Read* read : mine) {
      read->posted = read->bytes;
      queued_.erase(std::remove(queued_.begin(), queued_.end(), read), queued_.end());
      for (Piece* piece : pieces_) {
        if (piece->read == read) {
          fi_cancel(&ep_->fid, &piece->context); // completes it with an error
        }
      }
      finishLocked(read, why, &calls);
    }
  }
  for (auto& call : calls) {
    call();
  }
}

void RdmaEndpoint::progressLoop() {
  auto lastSweep = std::chrono::steady_clock::now();
  size_t liveRegions = 0;
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      if (stopping_) {
        return;
      }
      if (reads_.empty() && liveRegions == 0) {
        wake_.wait_for(lock, kIdleWait);
        if (stopping_) {
          return;
        }
      }
    }
    postPieces();
    fi_cq_entry entries[16];
    ssize_t n = fi_cq_read(cq_, entries, 16);
    if (n > 0) {
      for (ssize_t i = 0; i < n; ++i) {
        onPiece(static_cast<Piece*>(entries[i].op_context), "");
      }
    } else if (n == -FI_EAVAIL) {
      fi_cq_err_entry failure{};
      if (fi_cq_readerr(cq_, &failure, 0) > 0) {
        const char* detail = fi_cq_strerror(cq_, failure.prov_errno, failure.err_data, nullptr, 0);
        onPiece(
            static_cast<Piece*>(failure.op_context),
            "bad completion: " + describe("fi_read", -failure.err) + (detail ? std::string(" (") + detail + ")" : ""));
      }
    } else if (n != -FI_EAGAIN) {
      MONARCH_LOG(kError) << describe("fi_cq_read", static_cast<int>(n));
    }
    auto now = std::chrono::steady_clock::now();
    if (now - lastSweep >= kSweepInterval) {
      liveRegions = registrations_->sweep();
      failStalledReads(now);
      lastSweep = now;
    }
    if (exposed_.exchange(false)) {
      liveRegions = std::max<size_t>(liveRegions, 1); // counted at the next sweep
    }
    if (n <= 0) {
      std::this_thread::sleep_for(kPollInterval);
    }
  }
}

void RdmaEndpoint::shutdown() {
  std::vector<std::function<void()>> calls;
  {
    std::lock_guard<std::mutex> guard(mutex_);
    if (stopping_) {
      return;
    }
    stopping_ = true;
  }
  wake_.notify_all();
  if (progress_.joinable()) {
    progress_.join();
  }
  close();
}

void RdmaEndpoint::close() {
  std::vector<ReadDone> pending;
  {
    std::lock_guard<std::mutex> guard(mutex_);
    // The endpoint first: once it is closed the provider writes into no
    // buffer, so the reads' memory and the registrations may go.
    if (ep_ != nullptr) {
      fi_close(&ep_->fid);
      ep_ = nullptr;
    }
    for (Piece* piece : pieces_) {
      delete piece;
    }
    pieces_.clear();
    for (auto& read : reads_) {
      if (read.done) {
        pending.push_back(std::move(read.done));
      }
    }
    reads_.clear();
    queued_.clear();
    if (registrations_) {
      registrations_->clear();
      --openEndpoints_;
    }
    for (fid* object : {cq_ ? &cq_->fid : nullptr, av_ ? &av_->fid : nullptr, domain_ ? &domain_->fid : nullptr,
                        fabric_ ? &fabric_->fid : nullptr}) {
      if (object != nullptr) {
        int rc = fi_close(object);
        if (rc != 0) {
          MONARCH_LOG(kWarn) << describe("fi_close", rc);
        }
      }
    }
    cq_ = nullptr;
    av_ = nullptr;
    domain_ = nullptr;
    fabric_ = nullptr;
    if (info_ != nullptr) {
      libfabric().freeinfo(info_);
      info_ = nullptr;
    }
  }
  for (auto& done : pending) {
    done("rdma endpoint shut down");
  }
}

} // namespace monarch::rdma
