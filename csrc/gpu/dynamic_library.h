#pragma once

#include <string>
#include <vector>

namespace monarch::gpu {

// A shared library opened with dlopen and never closed: NCCL and the driver
// keep threads and device state that must outlive every communicator, and
// nothing here links against them, so one build runs on machines without them.
class DynamicLibrary {
 public:
  // A path, or a bare soname for the dynamic linker to find.
  struct Candidate {
    std::string name;
    // Take it only if the process has loaded it already (RTLD_NOLOAD).
    bool onlyIfLoaded = false;
  };

  // Tries `candidates` in order; the first that loads wins.
  static DynamicLibrary open(const std::vector<Candidate>& candidates);

  bool loaded() const {
    return handle_ != nullptr;
  }
  // The file that was loaded (resolved by the dynamic linker).
  const std::string& path() const {
    return path_;
  }
  // Why nothing loaded: each candidate with its dlerror.
  const std::string& error() const {
    return error_;
  }
  // The symbol's address, or nullptr when the library lacks it.
  void* symbol(const char* name) const;

 private:
  void* handle_ = nullptr;
  std::string path_;
  std::string error_;
};

// The directory of torch's own shared libraries (.../site-packages/torch/lib),
// found from the loaded libc10.so; empty when torch is not loaded.
std::string torchLibraryDir();

// Where to look for `soname`, in order: `override` (a path, when non-empty:
// then nothing else), a copy already loaded in the process (e.g. by torch),
// torch's lib directory, `wheelDir` under site-packages (pip's nvidia-*
// wheels), then the dynamic linker's default search path.
std::vector<DynamicLibrary::Candidate> librarySearchOrder(
    const std::string& soname, const std::string& wheelDir, const std::string& override);

} // namespace monarch::gpu
