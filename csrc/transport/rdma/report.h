#pragma once

// What the rdma transport finds of libfabric, for the doctor: no libfabric
// header needed to ask.

#include <string>
#include <vector>

namespace monarch::rdma {

// One fi_getinfo answer: which provider serves which fabric and domain (the
// device, for verbs and efa) with reliable datagram endpoints.
struct ProviderEntry {
  std::string provider;
  std::string fabric;
  std::string domain;
  bool rma = false;
};

struct LibraryReport {
  std::string library; // the file loaded; empty when none
  std::string version; // "1.17"
  std::string error; // why not loaded, or why the providers could not be listed
  std::vector<ProviderEntry> providers;
};

LibraryReport libraryReport();

// Whether this build has the rdma transport (libfabric's headers were there).
bool builtWithLibfabric();

} // namespace monarch::rdma
