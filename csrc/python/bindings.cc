// Python bindings: the backend class (as a c10d.Backend subclass) and the
// function torch_monarch/backend.py calls to create one.

#include <pybind11/chrono.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/utils/pybind.h>

#include "backend/monarch_backend.h"

namespace py = pybind11;

namespace monarch {
namespace {

c10::intrusive_ptr<MonarchBackend> createBackend(
    const c10::intrusive_ptr<c10d::Store>& store,
    int rank,
    int size,
    const std::string& groupName,
    std::chrono::milliseconds timeout,
    const std::string& bindAddress,
    size_t smallMessageBytes,
    size_t chunkBytes) {
  BackendOptions options;
  options.timeout = timeout;
  options.bindAddress = bindAddress;
  options.algorithms.smallMessageBytes = smallMessageBytes;
  options.algorithms.chunkBytes = chunkBytes;
  py::gil_scoped_release release;
  return c10::make_intrusive<MonarchBackend>(store, rank, size, groupName, options);
}

} // namespace
} // namespace monarch

PYBIND11_MODULE(_C, module) {
  module.doc() = "torch_monarch C++ backend";
  // Registers c10d::Backend with pybind before we derive from it.
  py::module_::import("torch._C._distributed_c10d");
  py::class_<monarch::MonarchBackend, c10d::Backend, c10::intrusive_ptr<monarch::MonarchBackend>>(
      module, "MonarchBackend")
      .def("error_message", [](monarch::MonarchBackend& self) {
        monarch::Status status = self.error();
        return status.ok() ? py::object(py::none()) : py::object(py::str(status.message));
      });
  module.def(
      "create_backend", &monarch::createBackend, py::arg("store"), py::arg("rank"), py::arg("size"),
      py::arg("group_name"), py::arg("timeout"), py::arg("bind_address"), py::arg("small_message_bytes"),
      py::arg("chunk_bytes"));
}
