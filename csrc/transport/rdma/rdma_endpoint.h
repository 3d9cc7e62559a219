#pragma once

// One libfabric endpoint per Fabric (transport/fabric.h): a
// reliable-datagram endpoint with RMA, its address vector and completion
// queue, the registration cache, and a progress thread. A sender exposes a
// registered buffer and sends its {address, bytes, key} over the TCP link; the
// receiver reads it straight into its own registered tensor with fi_read and
// acknowledges over TCP. The TCP link keeps the handshake, control frames and
// heartbeats, so a peer that dies or stops mid-read is named as on TCP alone.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <unordered_set>

#include "transport/rdma/registration_cache.h"

// libfabric's objects, declared here so that only rdma/*.cc need its headers
// (a build without them compiles rdma/unavailable.cc instead).
struct fi_info;
struct fid_fabric;
struct fid_av;
struct fid_cq;

namespace monarch::rdma {

// A peer in the endpoint's address vector (libfabric's fi_addr_t).
using PeerAddress = uint64_t;
constexpr PeerAddress kNoPeer = ~uint64_t(0); // FI_ADDR_UNSPEC

// The rdma transport cannot be had: libfabric is missing, or no provider
// offers what it needs. Raised to Python as RdmaUnavailableError.
class RdmaUnavailable : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Providers tried when none is named: RDMA hardware only (never tcp).
constexpr const char* kDefaultProviders[] = {"verbs;ofi_rxm", "efa"};

class RdmaEndpoint {
 public:
  // `provider` is an fi_info provider name ("tcp;ofi_rxm", "verbs;ofi_rxm",
  // "efa"); empty tries kDefaultProviders. A read whose pieces see no
  // completion for `stallBound` is cancelled, and fails (then goes over TCP
  // if the link is fine) once the provider has handed its pieces back.
  // Throws RdmaUnavailable.
  static std::shared_ptr<RdmaEndpoint> open(const std::string& provider, std::chrono::milliseconds stallBound);
  ~RdmaEndpoint();
  RdmaEndpoint(const RdmaEndpoint&) = delete;
  RdmaEndpoint& operator=(const RdmaEndpoint&) = delete;

  const std::string& provider() const {
    return provider_;
  }
  // This endpoint's address, for peers to insert.
  const std::string& address() const {
    return address_;
  }

  // Inserts a peer's address. False with `error` set for a bad one.
  bool addPeer(const std::string& address, PeerAddress* peer, std::string* error);

  // Registers `data` for peers to read while `owner` lives. False with
  // `error` set when the provider refuses (the caller sends inline instead).
  bool expose(void* data, size_t bytes, const std::shared_ptr<void>& owner, Registration* out, std::string* error);

  // Empty on success, else why the read failed.
  using ReadDone = std::function<void(const std::string& error)>;
  // Reads `bytes` at the peer's (remoteAddress, key) into `dest`, which
  // `owner` keeps alive until the provider is done with it. `done` runs
  // once, on the progress thread, or at once when the read cannot start.
  // `token` names the link, for cancelReads.
  void read(
      PeerAddress peer, void* dest, size_t bytes, uint64_t remoteAddress, uint64_t key, std::shared_ptr<void> owner,
      const void* token, ReadDone done);
  // Fails the reads of link `token` now (it broke); their memory stays held
  // until the provider lets go of it.
  void cancelReads(const void* token, const std::string& why);

  // Stops the progress thread, fails reads in flight and closes every
  // libfabric object. Later reads fail at once. The owner (RdmaPaths) calls it
  // before letting go, so the links that still hold the endpoint never run
  // the destructor's join on the progress thread itself.
  void shutdown();

  // Process-wide counts, for tests and the doctor.
  static size_t openEndpoints() {
    return openEndpoints_.load();
  }

 private:
  struct Read; // one read, posted in pieces of at most maxPiece_ bytes
  struct Piece; // the context the provider hands back with a piece's completion

  RdmaEndpoint() = default;
  void openWith(fi_info* info);
  void progressLoop();
  // Posts what it can of the queued reads; false when the provider is full.
  bool postPieces();
  void onPiece(Piece* piece, const std::string& error);
  // Calls a read's `done` at most once; frees it when the provider is done.
  void finishLocked(Read* read, std::string error, std::vector<std::function<void()>>* calls);
  void close();
  // Cancels the reads that saw no completion within stallBound_.
  void failStalledReads(std::chrono::steady_clock::time_point now);

  std::string provider_;
  std::string address_;
  fi_info* info_ = nullptr;
  fid_fabric* fabric_ = nullptr;
  fid_domain* domain_ = nullptr;
  fid_av* av_ = nullptr;
  fid_cq* cq_ = nullptr;
  fid_ep* ep_ = nullptr;
  std::unique_ptr<RegistrationCache> registrations_;
  size_t maxPiece_ = 0;
  std::chrono::milliseconds stallBound_{0};

  std::mutex mutex_;
  std::condition_variable wake_;
  std::list<Read> reads_; // guarded by mutex_; stable addresses
  std::deque<Read*> queued_; // reads with pieces left to post
  std::unordered_set<Piece*> pieces_; // what the provider holds
  std::atomic<bool> exposed_{false}; // a region was exposed since the last sweep
  bool stopping_ = false;
  std::thread progress_;
  static std::atomic<size_t> openEndpoints_;
};

} // namespace monarch::rdma
