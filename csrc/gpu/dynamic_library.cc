#include "gpu/dynamic_library.h"

#include <dlfcn.h>
#include <link.h>

#include <cstring>

namespace monarch::gpu {

namespace {

std::string dirname(const std::string& path) {
  auto slash = path.rfind('/');
  return slash == std::string::npos ? std::string() : path.substr(0, slash);
}

std::string loadedPath(void* handle) {
  struct link_map* map = nullptr;
  if (dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map != nullptr && map->l_name != nullptr) {
    return map->l_name;
  }
  return {};
}

int findTorchLibrary(struct dl_phdr_info* info, size_t /*size*/, void* out) {
  const char* name = info->dlpi_name;
  if (name == nullptr) {
    return 0;
  }
  const char* base = std::strrchr(name, '/');
  if (base != nullptr && std::strcmp(base + 1, "libc10.so") == 0) {
    *static_cast<std::string*>(out) = name;
    return 1;
  }
  return 0;
}

} // namespace

DynamicLibrary DynamicLibrary::open(const std::vector<Candidate>& candidates) {
  DynamicLibrary library;
  for (const auto& candidate : candidates) {
    // RTLD_LOCAL: the library's symbols stay out of the global namespace, so
    // a second copy loaded by someone else cannot be confused with ours.
    int flags = RTLD_NOW | RTLD_LOCAL | (candidate.onlyIfLoaded ? RTLD_NOLOAD : 0);
    void* handle = dlopen(candidate.name.c_str(), flags);
    if (handle == nullptr) {
      if (!candidate.onlyIfLoaded) {
        const char* why = dlerror(); // names the file
        library.error_ += (library.error_.empty() ? "" : "; ") + (why ? std::string(why) : candidate.name + ": not found");
      } else {
        dlerror(); // clear
      }
      continue;
    }
    library.handle_ = handle;
    library.path_ = loadedPath(handle);
    if (library.path_.empty()) {
      library.path_ = candidate.name;
    }
    library.error_.clear();
    return library;
  }
  return library;
}

void* DynamicLibrary::symbol(const char* name) const {
  if (handle_ == nullptr) {
    return nullptr;
  }
  void* address = dlsym(handle_, name);
  dlerror(); // a missing optional symbol is not an error to keep around
  return address;
}

std::string torchLibraryDir() {
  std::string path;
  dl_iterate_phdr(findTorchLibrary, &path);
  return dirname(path);
}

std::vector<DynamicLibrary::Candidate> librarySearchOrder(
    const std::string& soname, const std::string& wheelDir, const std::string& override) {
  if (!override.empty()) {
    return {{override, false}};
  }
  std::vector<DynamicLibrary::Candidate> candidates;
  // The copy torch already uses: one library instance per process.
  candidates.push_back({soname, true});
  std::string torchLib = torchLibraryDir();
  if (!torchLib.empty()) {
    candidates.push_back({torchLib + "/" + soname, false});
    std::string sitePackages = dirname(dirname(torchLib));
    if (!wheelDir.empty() && !sitePackages.empty()) {
      candidates.push_back({sitePackages + "/" + wheelDir + "/" + soname, false});
    }
  }
  candidates.push_back({soname, false});
  return candidates;
}

} // namespace monarch::gpu
