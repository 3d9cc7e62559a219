#pragma once

// libfabric, opened with dlopen at first use so that a machine without it
// still imports the extension and runs every other transport. Only the few
// real symbols are looked up here: fi_domain, fi_endpoint, fi_read and the
// rest are static inline calls through the ops tables of the objects that
// fi_fabric hands out (rdma/fi_*.h).

#include <rdma/fabric.h>

#include <cstdint>
#include <string>
#include <vector>

#include "transport/rdma/report.h"

namespace monarch::rdma {

// The libfabric API version this code is written against.
constexpr uint32_t kApiVersion = FI_VERSION(1, 17);

struct LibFabric {
  bool loaded = false;
  std::string path; // the file that was loaded
  std::string error; // why it did not load, with what to install
  uint32_t (*version)() = nullptr;
  int (*getinfo)(uint32_t, const char*, const char*, uint64_t, const fi_info*, fi_info**) = nullptr;
  void (*freeinfo)(fi_info*) = nullptr;
  fi_info* (*dupinfo)(const fi_info*) = nullptr;
  int (*fabric)(fi_fabric_attr*, fid_fabric**, void*) = nullptr;
  const char* (*strerror)(int) = nullptr;
};

// Opened once per process: MONARCH_LIBFABRIC_LIBRARY (a path), else
// libfabric.so.1 from the dynamic linker's search path. Never closed.
const LibFabric& libfabric();

// "what: <fi_strerror> (code)" for a negative libfabric return code.
std::string describe(const char* what, int code);

} // namespace monarch::rdma
