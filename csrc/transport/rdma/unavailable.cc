// The rdma transport of a build without libfabric's headers (setup.py
// compiles this instead of the other rdma/*.cc): every attempt to open it
// says so, and "auto" keeps TCP between hosts.

#include "transport/rdma/rdma_endpoint.h"
#include "transport/rdma/report.h"

namespace monarch::rdma {

namespace {

const char* const kWhy =
    "this build of torch_monarch has no rdma transport: libfabric's headers were missing when it was built "
    "(Debian/Ubuntu: apt-get install libfabric-dev, then rebuild)";

} // namespace

struct RdmaEndpoint::Read {};
struct RdmaEndpoint::Piece {};

std::atomic<size_t> RdmaEndpoint::openEndpoints_{0};
std::atomic<size_t> RegistrationCache::openRegions_{0};

bool builtWithLibfabric() {
  return false;
}

LibraryReport libraryReport() {
  LibraryReport report;
  report.error = kWhy;
  return report;
}

std::shared_ptr<RdmaEndpoint> RdmaEndpoint::open(const std::string& /*provider*/, std::chrono::milliseconds) {
  throw RdmaUnavailable(kWhy);
}

// Never called: no endpoint can be opened.
RdmaEndpoint::~RdmaEndpoint() = default;
RegistrationCache::~RegistrationCache() = default;
bool RdmaEndpoint::addPeer(const std::string&, PeerAddress*, std::string* error) {
  *error = kWhy;
  return false;
}
bool RdmaEndpoint::expose(void*, size_t, const std::shared_ptr<void>&, Registration*, std::string* error) {
  *error = kWhy;
  return false;
}
void RdmaEndpoint::read(PeerAddress, void*, size_t, uint64_t, uint64_t, std::shared_ptr<void>, const void*, ReadDone done) {
  done(kWhy);
}
void RdmaEndpoint::cancelReads(const void*, const std::string&) {}
void RdmaEndpoint::shutdown() {}

} // namespace monarch::rdma
