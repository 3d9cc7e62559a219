#include "transport/rdma/libfabric.h"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>

namespace monarch::rdma {

namespace {

template <typename Fn>
bool bind(void* handle, const char* name, Fn* slot, std::string* error) {
  *slot = reinterpret_cast<Fn>(::dlsym(handle, name));
  if (*slot == nullptr) {
    *error = std::string("libfabric lacks ") + name;
    return false;
  }
  return true;
}

LibFabric open() {
  LibFabric lib;
  const char* override = std::getenv("MONARCH_LIBFABRIC_LIBRARY");
  std::string name = override != nullptr && *override != '\0' ? override : "libfabric.so.1";
  // RTLD_LOCAL: its symbols stay out of the global namespace.
  void* handle = ::dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = ::dlerror();
    lib.error = (why != nullptr ? std::string(why) : name + ": not found") +
        "; the rdma transport needs libfabric 1.17 or later (Debian/Ubuntu: apt-get install libfabric1)";
    return lib;
  }
  lib.path = name;
  bool ok = bind(handle, "fi_version", &lib.version, &lib.error) &&
      bind(handle, "fi_getinfo", &lib.getinfo, &lib.error) && bind(handle, "fi_freeinfo", &lib.freeinfo, &lib.error) &&
      bind(handle, "fi_dupinfo", &lib.dupinfo, &lib.error) && bind(handle, "fi_fabric", &lib.fabric, &lib.error) &&
      bind(handle, "fi_strerror", &lib.strerror, &lib.error);
  if (ok && FI_MAJOR(lib.version()) == 1 && FI_MINOR(lib.version()) < FI_MINOR(kApiVersion)) {
    lib.error = "libfabric " + std::to_string(FI_MAJOR(lib.version())) + "." +
        std::to_string(FI_MINOR(lib.version())) + " at " + name + " is older than 1.17";
    ok = false;
  }
  lib.loaded = ok;
  return lib;
}

} // namespace

const LibFabric& libfabric() {
  static const LibFabric lib = open();
  return lib;
}

std::string describe(const char* what, int code) {
  const LibFabric& lib = libfabric();
  std::string text = lib.loaded ? lib.strerror(-code) : "libfabric not loaded";
  return std::string(what) + ": " + text + " (" + std::to_string(code) + ")";
}

bool builtWithLibfabric() {
  return true;
}

LibraryReport libraryReport() {
  const LibFabric& lib = libfabric();
  LibraryReport report;
  if (!lib.loaded) {
    report.error = lib.error;
    return report;
  }
  report.library = lib.path;
  uint32_t v = lib.version();
  report.version = std::to_string(FI_MAJOR(v)) + "." + std::to_string(FI_MINOR(v));
  fi_info* hints = lib.dupinfo(nullptr);
  hints->ep_attr->type = FI_EP_RDM;
  fi_info* found = nullptr;
  int rc = lib.getinfo(kApiVersion, nullptr, nullptr, 0, hints, &found);
  lib.freeinfo(hints);
  if (rc != 0) {
    report.error = rc == -FI_ENODATA ? "no provider offers reliable datagram endpoints" : describe("fi_getinfo", rc);
    return report;
  }
  for (fi_info* info = found; info != nullptr; info = info->next) {
    report.providers.push_back(ProviderEntry{
        info->fabric_attr->prov_name ? info->fabric_attr->prov_name : "",
        info->fabric_attr->name ? info->fabric_attr->name : "",
        info->domain_attr->name ? info->domain_attr->name : "", (info->caps & FI_RMA) != 0});
  }
  lib.freeinfo(found);
  return report;
}

} // namespace monarch::rdma
