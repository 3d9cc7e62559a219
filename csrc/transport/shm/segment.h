#pragma once

// POSIX shared-memory segments (shm_open + mmap) for ranks on one host.
// A segment's name lives in /dev/shm only while the group sets up: every
// rank unlinks it as soon as the peers have mapped it, so a job that is
// killed later leaves nothing behind. Names carry the creator's pid, so a
// job killed during the short setup window leaves a segment that the next
// group on the host recognises as stale and removes.

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace monarch {

class SharedSegment {
 public:
  // Creates and maps a new segment of `bytes`, with its pages reserved up
  // front so that a full /dev/shm is an error here rather than a SIGBUS on
  // first touch. Null with `error` set when that fails.
  static std::unique_ptr<SharedSegment> create(const std::string& name, size_t bytes, std::string* error);
  // Maps a peer's segment, which must be exactly `bytes` long.
  static std::unique_ptr<SharedSegment> open(const std::string& name, size_t bytes, std::string* error);
  // Removes a name from /dev/shm (the memory lives on while mapped).
  static void unlinkName(const std::string& name);

  ~SharedSegment();
  SharedSegment(const SharedSegment&) = delete;
  SharedSegment& operator=(const SharedSegment&) = delete;

  char* data() const {
    return static_cast<char*>(address_);
  }
  // Unlinks the name if this process created it and has not yet done so.
  void unlink();

 private:
  SharedSegment(std::string name, void* address, size_t bytes, bool owned)
      : name_(std::move(name)), address_(address), bytes_(bytes), named_(owned) {}

  const std::string name_;
  void* const address_;
  const size_t bytes_;
  bool named_; // this process created the name and it is still in /dev/shm
};

// "/monarch-<pid>-<endpoint id>-<channel>": one segment per Fabric
// and group.
std::string segmentName(pid_t pid, uint64_t endpointId, uint64_t channelId);

// Removes monarch segments whose creator process no longer exists.
void removeStaleSegments();

} // namespace monarch
