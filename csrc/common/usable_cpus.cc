#include "common/usable_cpus.h"

#include <sched.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>
#include <vector>

namespace monarch {

namespace {

std::string contentsOf(const std::string& path) {
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

std::vector<std::string> split(const std::string& text, char separator) {
  std::vector<std::string> parts;
  std::stringstream stream(text);
  std::string part;
  while (std::getline(stream, part, separator)) {
    parts.push_back(part);
  }
  return parts;
}

// mountinfo writes a space in a path as \040 (and so on for \t, \n, \\).
std::string unescaped(const std::string& field) {
  std::string plain;
  for (size_t i = 0; i < field.size(); ++i) {
    if (field[i] == '\\' && i + 3 < field.size()) {
      const std::string digits = field.substr(i + 1, 3);
      if (std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '7'; })) {
        plain += static_cast<char>(std::stoi(digits, nullptr, 8));
        i += 3;
        continue;
      }
    }
    plain += field[i];
  }
  return plain;
}

// One cgroup hierarchy that can limit CPU: where it is mounted, which of its
// cgroups the mount shows at that place, and the process's cgroup in it.
struct CpuHierarchy {
  bool v2 = false;
  std::string mountRoot;
  std::string mountPoint;
  std::string cgroupPath;
};

bool listsCpu(const std::string& controllers) {
  const auto names = split(controllers, ',');
  return std::find(names.begin(), names.end(), "cpu") != names.end();
}

// The limit one cgroup directory sets, in CPUs.
std::optional<double> limitIn(const CpuHierarchy& hierarchy, const std::string& dir) {
  double quota = -1;
  double period = 0;
  if (hierarchy.v2) {
    std::stringstream max(contentsOf(dir + "/cpu.max"));
    std::string first;
    if (!(max >> first) || first == "max" || !(max >> period)) {
      return std::nullopt;
    }
    quota = std::strtod(first.c_str(), nullptr);
  } else {
    std::stringstream(contentsOf(dir + "/cpu.cfs_quota_us")) >> quota;
    std::stringstream(contentsOf(dir + "/cpu.cfs_period_us")) >> period;
  }
  if (quota <= 0 || period <= 0) {
    return std::nullopt;
  }
  return quota / period;
}

} // namespace

std::optional<double> cgroupCpuLimit(const std::string& procCgroup, const std::string& procMountinfo) {
  // The process's cgroup in the v2 hierarchy ("0::path") and in a v1
  // hierarchy whose controllers include cpu ("N:cpu,cpuacct:path").
  std::optional<std::string> v2Path;
  std::optional<std::string> v1Path;
  for (const std::string& line : split(procCgroup, '\n')) {
    const auto first = line.find(':');
    const auto second = first == std::string::npos ? std::string::npos : line.find(':', first + 1);
    if (second == std::string::npos) {
      continue;
    }
    const std::string controllers = line.substr(first + 1, second - first - 1);
    const std::string path = line.substr(second + 1);
    if (line.compare(0, first, "0") == 0 && controllers.empty()) {
      v2Path = path;
    } else if (listsCpu(controllers)) {
      v1Path = path;
    }
  }
  // Their mounts: "id parent dev root mountpoint options [optional...] - type source superoptions".
  std::vector<CpuHierarchy> hierarchies;
  for (const std::string& line : split(procMountinfo, '\n')) {
    std::vector<std::string> fields;
    std::stringstream stream(line);
    for (std::string field; stream >> field;) {
      fields.push_back(field);
    }
    const auto dash = std::find(fields.begin(), fields.end(), "-");
    if (fields.size() < 5 || dash == fields.end() || dash + 1 == fields.end()) {
      continue;
    }
    CpuHierarchy hierarchy;
    hierarchy.mountRoot = unescaped(fields[3]);
    hierarchy.mountPoint = unescaped(fields[4]);
    const std::string& type = *(dash + 1);
    if (type == "cgroup2" && v2Path) {
      hierarchy.v2 = true;
      hierarchy.cgroupPath = *v2Path;
    } else if (type == "cgroup" && v1Path && fields.end() - dash > 3 && listsCpu(*(dash + 3))) {
      hierarchy.cgroupPath = *v1Path;
    } else {
      continue;
    }
    hierarchies.push_back(hierarchy);
  }
  std::optional<double> tightest;
  for (const CpuHierarchy& hierarchy : hierarchies) {
    // The mount shows the cgroups under its root; a path outside it (a
    // container without its own cgroup namespace) is read at the mount's top.
    std::string below;
    const std::string& root = hierarchy.mountRoot == "/" ? std::string() : hierarchy.mountRoot;
    if (hierarchy.cgroupPath.compare(0, root.size(), root) == 0) {
      below = hierarchy.cgroupPath.substr(root.size());
    }
    while (!below.empty() && below.back() == '/') {
      below.pop_back();
    }
    for (;;) {
      const auto limit = limitIn(hierarchy, hierarchy.mountPoint + below);
      if (limit && (!tightest || *limit < *tightest)) {
        tightest = limit;
      }
      if (below.empty()) {
        break;
      }
      below.resize(below.rfind('/'));
    }
  }
  return tightest;
}

int usableCpus() {
  cpu_set_t cpus;
  int usable = sched_getaffinity(0, sizeof(cpus), &cpus) == 0 ? CPU_COUNT(&cpus) : 1;
  const auto limit = cgroupCpuLimit(contentsOf("/proc/self/cgroup"), contentsOf("/proc/self/mountinfo"));
  if (limit) {
    usable = std::min(usable, static_cast<int>(std::ceil(*limit)));
  }
  return std::max(usable, 1);
}

} // namespace monarch
