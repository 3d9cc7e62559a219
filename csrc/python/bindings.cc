// Python bindings: the backend class (as a c10d.Backend subclass), the
// function torch_monarch/backend.py calls to create one, and the translation
// of MonarchError into torch_monarch's exception types.

#include <pybind11/chrono.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/utils/pybind.h>

#include "backend/errors.h"
#include "backend/monarch_backend.h"
#include "gpu/bindings.h"
#include "python/frame_probe.h"

namespace py = pybind11;

namespace monarch {
namespace {

c10::intrusive_ptr<MonarchBackend> createBackend(
    const c10::intrusive_ptr<c10d::Store>& store,
    int rank,
    int size,
    const std::string& groupName,
    std::chrono::milliseconds timeout,
    double heartbeatTimeoutSeconds,
    const std::string& transport,
    const std::string& bindAddress,
    size_t smallMessageBytes,
    size_t chunkBytes,
    int directMaxRanks,
    int threads,
    const std::string& hostName,
    size_t shmMinBytes,
    size_t shmSegmentBytes,
    const std::string& gpuTransport) {
  BackendOptions options;
  options.timeout = timeout;
  options.heartbeatTimeout = std::chrono::milliseconds(static_cast<int64_t>(heartbeatTimeoutSeconds * 1000));
  options.bindAddress = bindAddress;
  options.allowRemoteRead = transport != "tcp";
  options.algorithms.smallMessageBytes = smallMessageBytes;
  options.algorithms.chunkBytes = chunkBytes;
  options.algorithms.directMaxRanks = directMaxRanks;
  options.algorithms.threads = threads;
  options.hostName = hostName;
  options.algorithms.sharedMemoryMinBytes = shmMinBytes;
  options.sharedRegionBytes = shmSegmentBytes;
  options.gpuTransport = gpuTransport;
  py::gil_scoped_release release;
  return MonarchBackend::join(store, rank, size, groupName, options);
}

// Raises the torch_monarch.errors class for `error.kind()`.
void raiseTyped(const MonarchError& error) {
  static const char* const kClassNames[] = {
      "DistBackendError", // kNone never raises; kept for indexing
      "PeerFailureError",
      "CollectiveTimeoutError",
      "AbortedError",
      "CollectiveMismatchError",
      "ProtocolError",
  };
  auto index = static_cast<size_t>(error.kind());
  const char* name = index < sizeof(kClassNames) / sizeof(kClassNames[0]) ? kClassNames[index] : "DistBackendError";
  py::object errors = py::module_::import("torch_monarch.errors");
  py::object instance = errors.attr(name)(error.what_without_backtrace(), error.ranks());
  PyErr_SetObject(py::type::handle_of(instance).ptr(), instance.ptr());
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
      .def("connection_count", &MonarchBackend::connectionCount)
      .def(
          "payload_bytes_sent", &MonarchBackend::payloadBytesSent,
          "Payload bytes this rank has sent to each rank of the group since it was created.");

  module.def(
      "create_backend", &monarch::createBackend, py::arg("store"), py::arg("rank"), py::arg("size"),
      py::arg("group_name"), py::arg("timeout"), py::arg("heartbeat_timeout"), py::arg("transport"), py::arg("bind_address"),
      py::arg("small_message_bytes"), py::arg("chunk_bytes"), py::arg("direct_max_ranks"), py::arg("threads"),
      py::arg("host_name"), py::arg("shm_min_bytes"), py::arg("shm_segment_bytes"), py::arg("gpu_transport") = "auto");
  monarch::bindFrameProbe(module);
  monarch::gpu::bindGpu(module);
}
