#pragma once

#include <optional>
#include <string>

namespace monarch {

// CPUs this process may keep busy: those in its affinity mask, and no more
// than its cgroup's CPU quota (rounded up), which is how a container's CPU
// limit (Kubernetes, `docker --cpus`) is set. At least 1.
int usableCpus();

// The tightest CPU quota, in CPUs, on the cgroup path of the process that
// `procCgroup` and `procMountinfo` describe (the contents of
// /proc/<pid>/cgroup and /proc/<pid>/mountinfo): cgroup v2's cpu.max and
// v1's cpu.cfs_quota_us / cpu.cfs_period_us, from its own cgroup up to the
// root of the mount. nullopt where no level sets one.
std::optional<double> cgroupCpuLimit(const std::string& procCgroup, const std::string& procMountinfo);

} // namespace monarch
