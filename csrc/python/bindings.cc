// Python bindings: the backend class (as a c10d.Backend subclass), the
// function torch_monarch/backend.py calls to create one with its Options, the
// translation of MonarchError into torch_monarch's exception types, and the
// GPU layer's report. torch_monarch/_C.pyi types all of it.

#include <algorithm>

#include <pybind11/chrono.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/utils/pybind.h>

#include "algorithms/cross_memory_direct.h"
#include "algorithms/parallel.h"
#include "algorithms/reduce_kernels.h"
#include "backend/monarch_backend.h"
#include "transport/rdma/rdma_endpoint.h"
#include "transport/rdma/report.h"
#include "transport/shm/tensor_pool.h"
#include "contract/errors.h"
#include "gpu/device_backend.h"
#include "contract/gpu_route.h"
#include "common/usable_cpus.h"

namespace py = pybind11;

namespace monarch {
namespace {

// torch_monarch.Options (resolved: no field None) as the backend's settings,
// field by field through BackendOptions::forEachField.
BackendOptions backendOptions(const py::handle& options) {
  BackendOptions resolved;
  resolved.forEachField([&](const char* name, auto& member) {
    py::object value = options.attr(name);
    try {
      member = value.cast<std::decay_t<decltype(member)>>();
    } catch (const py::cast_error&) {
      throw py::type_error(
          std::string("Options.") + name + " cannot be " + py::str(py::repr(value)).cast<std::string>() +
          " when the group is created");
    }
  });
  return resolved;
}

std::vector<std::string> backendOptionNames() {
  std::vector<std::string> names;
  BackendOptions().forEachField([&](const char* name, auto& /*member*/) { names.emplace_back(name); });
  return names;
}

c10::intrusive_ptr<MonarchBackend> createBackend(
    const c10::intrusive_ptr<c10d::Store>& store,
    int rank,
    int size,
    const std::string& groupName,
    const py::handle& options) {
  BackendOptions resolved = backendOptions(options);
  py::gil_scoped_release release;
  if (resolved.enableReconfigure) {
#ifdef MONARCH_NATIVE_RECONFIGURE
    return MonarchBackend::createReconfigurable(store, rank, size, groupName, std::move(resolved));
#else
    TORCH_CHECK(false, "enable_reconfigure needs torch >= 2.14 (c10d's native reconfigure); this build's torch has none");
#endif
  }
  return MonarchBackend::join(store, rank, size, groupName, std::move(resolved));
}

// Raises the torch_monarch.errors class for `error.kind()`.
void raiseTyped(const MonarchError& error) {
  py::object errors = py::module_::import("torch_monarch.errors");
  py::object instance = errors.attr(errorClassName(error.kind()))(error.what_without_backtrace(), error.ranks());
  PyErr_SetObject(py::type::handle_of(instance).ptr(), instance.ptr());
}

// {kind name: class name} for every failure kind, as errors.py looks
// error_info() kinds up.
py::dict errorClasses() {
  py::dict classes;
#define MONARCH_ERROR_KIND_CLASS(kind, value, name, pythonClass) \
  if (ErrorKind::kind != ErrorKind::kNone) {                      \
    classes[name] = pythonClass;                                  \
  }
  MONARCH_ERROR_KINDS(MONARCH_ERROR_KIND_CLASS)
#undef MONARCH_ERROR_KIND_CLASS
  return classes;
}

// The benchmark's copy kernels take two contiguous CPU tensors of one size.
void checkCopyArguments(const at::Tensor& dst, const at::Tensor& src, const char* name) {
  TORCH_CHECK_VALUE(dst.device().is_cpu() && src.device().is_cpu(), name, " takes CPU tensors");
  TORCH_CHECK_VALUE(dst.is_contiguous() && src.is_contiguous(), name, " takes contiguous tensors");
  TORCH_CHECK_VALUE(dst.nbytes() == src.nbytes(), name, ": ", dst.nbytes(), " bytes into ", src.nbytes());
}

} // namespace
} // namespace monarch

PYBIND11_MODULE(_C, module) {
  module.doc() = "torch_monarch C++ backend";
  // Registers c10d::Backend with pybind before we derive from it.
  py::module_::import("torch._C._distributed_c10d");

  // Registered after torch's own translators, so it is tried first: a
  // MonarchError reaches Python as its typed subclass of DistBackendError
  // wherever it is raised (work.wait(), blocking collectives, ...).
  py::register_exception_translator([](std::exception_ptr error) {
    if (!error) {
      return;
    }
    try {
      std::rethrow_exception(error);
    } catch (const monarch::MonarchError& e) {
      monarch::raiseTyped(e);
    } catch (const monarch::rdma::RdmaUnavailable& e) {
      py::object type = py::module_::import("torch_monarch.errors").attr("RdmaUnavailableError");
      PyErr_SetString(type.ptr(), e.what());
    }
  });

  using monarch::MonarchBackend;
  py::class_<MonarchBackend, c10d::Backend, c10::intrusive_ptr<MonarchBackend>>(module, "MonarchBackend")
      .def_property_readonly("supports_shrinking", &MonarchBackend::supportsShrinking)
      .def(
          "shrink",
          [](MonarchBackend& self, const std::vector<int64_t>& ranks, int flags, const py::object& options) {
            c10::intrusive_ptr<c10d::Backend::Options> override;
            if (!options.is_none() && py::hasattr(options, "timeout") && !options.attr("timeout").is_none()) {
              override = c10::make_intrusive<c10d::Backend::Options>(
                  "monarch", options.attr("timeout").cast<std::chrono::milliseconds>());
            }
            py::gil_scoped_release release;
            return self.shrink(ranks, flags, override);
          },
          py::arg("ranks_to_exclude"), py::arg("shrink_flags") = 0, py::arg("pg_options") = py::none())
      .def(
          "reconfigure",
          [](MonarchBackend& self, const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
             const std::string& groupName) {
            py::gil_scoped_release release;
            return self.reconfigure(store, rank, size, groupName);
          },
          py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("group_name"))
#ifdef MONARCH_NATIVE_RECONFIGURE
      // c10d's own reconfigure(opts), which the overload above would hide.
      .def(
          "reconfigure",
          [](MonarchBackend& self, const c10d::ReconfigureOptions& opts) {
            py::gil_scoped_release release;
            return self.reconfigure(opts);
          },
          py::arg("opts"))
#endif
      .def(
          "error_info",
          [](MonarchBackend& self) -> py::object {
            monarch::Status status = self.error();
            if (status.ok()) {
              return py::none();
            }
            return py::make_tuple(monarch::errorKindName(status.kind), status.ranks, status.message);
          },
          "None while healthy, else (kind, ranks, message) of the failure that broke the group.")
      .def(
          "device_backend_name", &MonarchBackend::deviceBackendName,
          "The backend of this group's CUDA tensors: 'monarch-NCCL' or 'monarch-host-staged'; '' before the first.")
      .def_property_readonly(
          "threads", &MonarchBackend::threads,
          "Threads that reduce and copy the group's large messages, its worker included.")
      .def("connection_count", &MonarchBackend::connectionCount)
      .def(
          "channel_count", &MonarchBackend::channelCount,
          "Channels (groups and their confirmations) registered on this group's endpoint.")
      .def(
          "payload_bytes_sent", &MonarchBackend::payloadBytesSent,
          "Payload bytes this rank has sent to each rank of the group since it was created.")
      .def(
          "transport_bytes", &MonarchBackend::transportBytes,
          "Payload bytes the group's links moved, by path: tcp_sent (inline on TCP), remote_read (same-host "
          "process_vm_readv), rdma_read (fi_read from peers), rdma_fallbacks (rdma attempts that went over TCP).")
      .def(
          "rdma_provider", &MonarchBackend::rdmaProvider,
          "The libfabric provider of the RDMA reads to peers on other hosts; '' when payloads go over TCP.");

  module.def(
      "create_backend", &monarch::createBackend, py::arg("store"), py::arg("rank"), py::arg("size"),
      py::arg("group_name"), py::arg("options"),
      "Joins a new group, or with options.enable_reconfigure makes one to reconfigure from handles; `options` is a "
      "torch_monarch.Options with every field resolved.");
#ifdef MONARCH_NATIVE_RECONFIGURE
  module.attr("NATIVE_RECONFIGURE") = true;
#else
  module.attr("NATIVE_RECONFIGURE") = false;
#endif
  module.def(
      "backend_option_names", &monarch::backendOptionNames,
      "The torch_monarch.Options fields the backend reads, in BackendOptions::forEachField order.");
  module.attr("ERROR_CLASSES") = monarch::errorClasses();
  module.def(
      "rdma_report",
      [] {
        monarch::rdma::LibraryReport found = monarch::rdma::libraryReport();
        py::dict report;
        report["library"] = found.library;
        report["version"] = found.version;
        report["error"] = found.error;
        py::list providers;
        for (const auto& entry : found.providers) {
          providers.append(py::make_tuple(entry.provider, entry.fabric, entry.domain, entry.rma));
        }
        report["providers"] = providers;
        return report;
      },
      "libfabric as the rdma transport sees it: library, version, error (why not loaded) and the providers "
      "offering reliable datagram endpoints as (provider, fabric, domain, rma).");
  module.attr("RDMA_BUILT") = monarch::rdma::builtWithLibfabric();
  module.def(
      "streaming_copy",
      [](at::Tensor& dst, const at::Tensor& src) {
        monarch::checkCopyArguments(dst, src, "streaming_copy");
        py::gil_scoped_release released;
        monarch::copyBytes(dst.data_ptr(), src.data_ptr(), dst.nbytes(), /*streaming=*/true);
      },
      py::arg("dst"), py::arg("src"),
      "Copies src into dst on this thread with the streaming stores the collectives write large results with "
      "(benchmarks/collectives.py counts its rate in the memory bound).");
  module.def(
      "fan_out_copy",
      [](std::vector<at::Tensor>& destinations, const at::Tensor& src, bool streaming) {
        TORCH_CHECK_VALUE(!destinations.empty(), "fan_out_copy takes at least one destination");
        std::vector<char*> to;
        for (at::Tensor& dst : destinations) {
          monarch::checkCopyArguments(dst, src, "fan_out_copy");
          to.push_back(static_cast<char*>(dst.data_ptr()));
        }
        py::gil_scoped_release released;
        monarch::copyToEach(to, static_cast<const char*>(src.data_ptr()), src.nbytes(), streaming);
      },
      py::arg("destinations"), py::arg("src"), py::arg("streaming"),
      "Copies src into every destination on this thread, 64 KiB of src at a time into all of them, as the "
      "pooled all-gather pushes a block (benchmarks/collectives.py counts its rate in the bound of the ops that "
      "write each byte they read several times).");
  module.def(
      "tiled_copy",
      [](at::Tensor& dst, const at::Tensor& src) {
        monarch::checkCopyArguments(dst, src, "tiled_copy");
        py::gil_scoped_release released;
        // The reductions store each tile of a result with one cached copy;
        // glibc copies a whole large buffer with non-temporal stores instead,
        // which skip the cache the ops' results stay in.
        constexpr size_t kPiece = monarch::kTileBytes;
        auto* to = static_cast<char*>(dst.data_ptr());
        const auto* from = static_cast<const char*>(src.data_ptr());
        for (size_t offset = 0; offset < dst.nbytes(); offset += kPiece) {
          monarch::copyBytes(to + offset, from + offset, std::min(kPiece, dst.nbytes() - offset), /*streaming=*/false);
        }
      },
      py::arg("dst"), py::arg("src"),
      "Copies src into dst on this thread 16 KiB at a time with cached stores, as the reductions write their "
      "results below the streaming size (benchmarks/collectives.py counts its rate in the memory bound).");
  module.def(
      "direct_ops", [] { return monarch::SharedTensorPool::instance().directOps(); },
      "Collectives of this process, all groups together, that read and wrote tensors from allocate_tensor in "
      "place, with no copy through the shared-memory slots.");
  module.def(
      "cross_memory_ops", &monarch::crossMemoryOps,
      "Collectives of this process, all groups together, that read and wrote their peers' ordinary tensors with "
      "the kernel's cross-memory copies (process_vm_readv / process_vm_writev), with no copy through the "
      "shared-memory slots.");
  module.def(
      "usable_cpus", &monarch::usableCpus,
      "CPUs this process may keep busy: its affinity mask, capped by its cgroup's CPU quota (rounded up).");
  module.def(
      "cgroup_cpu_limit", &monarch::cgroupCpuLimit, py::arg("proc_cgroup"), py::arg("proc_mountinfo"),
      "The tightest CPU quota, in CPUs, over the cgroup path that the texts of /proc/<pid>/cgroup and "
      "/proc/<pid>/mountinfo describe (cgroup v2 cpu.max, v1 cpu.cfs_quota_us); None where none is set.");
  module.def(
      "rdma_resources",
      [] {
        return std::map<std::string, size_t>{
            {"endpoints", monarch::rdma::RdmaEndpoint::openEndpoints()},
            {"registrations", monarch::rdma::RegistrationCache::openRegions()}};
      },
      "libfabric endpoints and memory registrations open in this process (leak checks).");
  module.def(
      "gpu_report", &monarch::gpu::gpuReport,
      "(key, value) pairs about the GPU layer: the platform the extension was built for, the collectives library "
      "(NCCL/RCCL) and driver it loaded, and why not where it could not.");
  module.def(
      "choose_gpu_route",
      [](const std::string& transport, const std::vector<std::pair<std::string, bool>>& ranks) {
        std::vector<monarch::gpu::RankDevice> devices;
        for (const auto& [uuid, loaded] : ranks) {
          TORCH_CHECK_VALUE(uuid.size() == 16, "a GPU UUID has 16 bytes, got ", uuid.size());
          monarch::gpu::RankDevice device;
          std::copy(uuid.begin(), uuid.end(), device.uuid.begin());
          device.collectivesLoaded = loaded;
          devices.push_back(device);
        }
        auto choice = monarch::gpu::chooseRoute(monarch::gpu::parseGpuTransport(transport), devices);
        return std::make_pair(std::string(monarch::gpu::routeName(choice.route)), choice.reason);
      },
      py::arg("gpu_transport"), py::arg("ranks"),
      "The route ('nccl' or 'host') and why, for a group whose ranks each report (GPU UUID bytes, NCCL loaded).");
}
