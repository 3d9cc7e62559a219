// Each collective of the host-staged route: which tensors the op reads
// (copied to the host first), which it writes (copied back after), and the
// same op on the host copies. Where the host path packs its inputs on the
// calling thread (Pack::kOnCaller), the caller waits for the copies to the
// host (waitHere); elsewhere the group's worker does (the op's gate) and
// the caller never waits for the GPU.

#include "gpu/host_staged_backend.h"

#include <c10/cuda/CUDAFunctions.h>

namespace monarch::gpu {

namespace {

std::vector<const at::Tensor*> pointers(const at::Tensor& tensor) {
  return {&tensor};
}

std::vector<const at::Tensor*> pointers(const std::vector<at::Tensor>& tensors) {
  std::vector<const at::Tensor*> all;
  for (const auto& tensor : tensors) {
    all.push_back(&tensor);
  }
  return all;
}

std::vector<const at::Tensor*> pointers(const std::vector<std::vector<at::Tensor>>& lists) {
  std::vector<const at::Tensor*> all;
  for (const auto& list : lists) {
    for (const auto& tensor : list) {
      all.push_back(&tensor);
    }
  }
  return all;
}

template <typename A, typename B>
std::vector<const at::Tensor*> pointers(const A& a, const B& b) {
  auto all = pointers(a);
  auto more = pointers(b);
  all.insert(all.end(), more.begin(), more.end());
  return all;
}

} // namespace

HostStagedBackend::HostStagedBackend(c10d::Backend& host, std::chrono::milliseconds timeout)
    : c10d::Backend(host.getRank(), host.getSize()), host_(host), timeoutMs_(timeout.count()) {}

c10::cuda::CUDAStream HostStagedBackend::streamFor(c10::Device device) {
  std::lock_guard<std::mutex> guard(streamsMutex_);
  auto it = streams_.find(device.index());
  if (it == streams_.end()) {
    // High priority, like the NCCL route's: the copies are not queued behind
    // the caller's compute, only ordered after the inputs they need.
    it = streams_.emplace(device.index(), c10::cuda::getStreamFromPool(/*isHighPriority=*/true, device.index())).first;
  }
  return it->second;
}

Staging HostStagedBackend::stage(const std::vector<const at::Tensor*>& tensors, const char* op) {
  c10::Device device = stagingDevice(tensors, op);
  return Staging(device, streamFor(device), rank_);
}

template <typename HostOp>
c10::intrusive_ptr<c10d::Work> HostStagedBackend::inPlace(
    const char* name, c10d::OpType type, std::vector<at::Tensor>& tensors, Pack pack, HostOp&& hostOp) {
  Staging staging = stage(pointers(tensors), name);
  auto hosts = staging.inout(tensors);
  if (pack == Pack::kOnCaller) {
    staging.waitHere(packTimeout());
  }
  return staging.run(type, tensors, [&] { return hostOp(hosts); });
}

template <typename Outputs, typename Inputs, typename HostOp>
c10::intrusive_ptr<c10d::Work> HostStagedBackend::outOfPlace(
    const char* name, c10d::OpType type, Outputs& outputs, Inputs& inputs, std::vector<at::Tensor> results,
    Pack pack, HostOp&& hostOp) {
  Staging staging = stage(pointers(outputs, inputs), name);
  auto hostInputs = staging.input(inputs);
  auto hostOutputs = staging.output(outputs);
  if (pack == Pack::kOnCaller) {
    staging.waitHere(packTimeout());
  }
  return staging.run(type, std::move(results), [&] { return hostOp(hostOutputs, hostInputs); });
}

c10::intrusive_ptr<c10d::Work> HostStagedBackend::broadcast(std::vector<at::Tensor>& tensors, const c10d::BroadcastOptions& opts) {
  return inPlace("broadcast", c10d::OpType::BROADCAST, tensors, Pack::kOnWorker, [&](auto& hosts) {
    return host_.broadcast(hosts, opts);
  });
}

c10::intrusive_ptr<c10d::Work> HostStagedBackend::allreduce(std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) {
  return inPlace("allreduce", c10d::OpType::ALLREDUCE, tensors, Pack::kOnWorker, [&](auto& hosts) {
    return host_.allreduce(hosts, opts);
  });
}

c10::intrusive_ptr<c10d::Work> HostStagedBackend::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  return inPlace("allreduce_coalesced", c10d::OpType::ALLREDUCE_COALESCED, tensors, Pack::kOnCaller, [&](auto& hosts) {
    return host_.allreduce_coalesced(hosts, opts);
  });
}

c10::intrusive_ptr<c10d::Work> HostStagedBackend::reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) {
  return inPlace("reduce", c10d::OpType::REDUCE, tensors, Pack::kOnCaller, [&](auto& hosts) {
    return host_.reduce(hosts, opts);
  });
}

c10::intrusive_ptr<c10d::Work> HostStagedBackend::allgather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs, const c10d::AllgatherOptions& opts) {
  std::vector<at::Tensor> results = outputs.empty() ? std::vector<at::Tensor>() : outputs[0];
  return outOfPlace(
      "allgather", c10d::OpType::ALLGATHER, outputs, inputs, results, Pack::kOnWorker,
      [&](auto& out, auto& in) { return host_.allgather(out, in, opts); });
}

c10::intrusive_ptr<c10d::Work> HostStagedBackend::_allgather_base(
    at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions& opts) {
  return outOfPlace(
      "_allgather_base", c10d::OpType::_ALLGATHER_BASE, output, input, {output}, Pack::kOnWorker,
      [&](auto& out, auto& in) { return host_._allgather_base(out, in, opts); });
}

c10::intrusive_ptr<c10d::Work> HostStagedBackend::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& outputLists, std::vector<at::Tensor>& inputs, const c10d::AllgatherOptions& opts) {
  std::vector<at::Tensor> results;
  for (const auto& list : outputLists) {
    results.insert(results.end(), list.begin(), list.end());
  }
  return outOfPlace(
      "allgather_coalesced", c10d::OpType::ALLGATHER_COALESCED, outputLists, inputs, results, Pack::kOnCaller,
      [&](auto& out, auto& in) { return host_.allgather_coalesced(out, in, opts); });
}

c10::intrusive_ptr<c10d::Work> HostStagedBackend::allgather_into_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs, const c10d::AllgatherOptions& opts) {
  return outOfPlace(
      "allgather_into_tensor_coalesced", c10d::OpType::COALESCED, outputs, inputs, outputs, Pack::kOnWorker,
      [&](auto& out, auto& in) { return host_.allgather_into_tensor_coalesced(out, in, opts); });
}

c10::intrusive_ptr<c10d::Work> HostStagedBackend::gather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs, const c10d::GatherOptions& opts) {
  std::vector<at::Tensor> results = outputs.empty() ? std::vector<at::Tensor>() : outputs[0];
  return outOfPlace(
      "gather", c10d::OpType::GATHER, outputs, inputs, results, Pack::kOnWorker,
      [&](auto& out, auto& in) { return host_.gather(out, in, opts); });
}

c10::intrusive_ptr<c10d::Work> HostStagedBackend::scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs, const c10d::ScatterOptions& opts) {
  return outOfPlace(
      "scatter", c10d::OpType::SCATTER, outputs, inputs, outputs, Pack::kOnCaller,
      [&](auto& out, auto& in) { return host_.scatter(out, in, opts); });
}

c10::intrusive_ptr<c10d::Work> HostStagedBackend::reduce_scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs, const c10d::ReduceScatterOptions& opts) {
  return outOfPlace(
      "reduce_scatter", c10d::OpType::REDUCE_SCATTER, outputs, inputs, outputs, Pack::kOnCaller,
      [&](auto& out, auto& in) { return host_.reduce_scatter(out, in, opts); });
}

c10::intrusive_ptr<c10d::Work> HostStagedBackend::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) {
  return outOfPlace(
      "_reduce_scatter_base", c10d::OpType::_REDUCE_SCATTER_BASE, output, input, {output}, Pack::kOnWorker,
      [&](auto& out, auto& in) { return host_._reduce_scatter_base(out, in, opts); });
}

c10::intrusive_ptr<c10d::Work> HostStagedBackend::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs, const c10d::ReduceScatterOptions& opts) {
  return outOfPlace(
      "reduce_scatter_tensor_coalesced", c10d::OpType::COALESCED, outputs, inputs, outputs, Pack::kOnWorker,
      [&](auto& out, auto& in) { return host_.reduce_scatter_tensor_coalesced(out, in, opts); });
}

c10::intrusive_ptr<c10d::Work> HostStagedBackend::alltoall_base(
    at::Tensor& output, at::Tensor& input, std::vector<int64_t>& outputSplitSizes,
    std::vector<int64_t>& inputSplitSizes, const c10d::AllToAllOptions& opts) {
  return outOfPlace(
      "alltoall_base", c10d::OpType::ALLTOALL_BASE, output, input, {output}, Pack::kOnWorker,
      [&](auto& out, auto& in) { return host_.alltoall_base(out, in, outputSplitSizes, inputSplitSizes, opts); });
}

c10::intrusive_ptr<c10d::Work> HostStagedBackend::alltoall(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs, const c10d::AllToAllOptions& opts) {
  return outOfPlace(
      "alltoall", c10d::OpType::ALLTOALL, outputs, inputs, outputs, Pack::kOnCaller,
      [&](auto& out, auto& in) { return host_.alltoall(out, in, opts); });
}

c10::intrusive_ptr<c10d::Work> HostStagedBackend::send(std::vector<at::Tensor>& tensors, int dstRank, int tag) {
  Staging staging = stage(pointers(tensors), "send");
  auto hosts = staging.input(tensors);
  // The host backend posts a send on this thread, at once: the data must be
  // on the host before it returns.
  staging.waitHere(packTimeout());
  return staging.run(c10d::OpType::SEND, tensors, [&] { return host_.send(hosts, dstRank, tag); });
}

c10::intrusive_ptr<c10d::Work> HostStagedBackend::recv(std::vector<at::Tensor>& tensors, int srcRank, int tag) {
  Staging staging = stage(pointers(tensors), "recv");
  auto hosts = staging.output(tensors);
  return staging.run(c10d::OpType::RECV, tensors, [&] { return host_.recv(hosts, srcRank, tag); });
}

c10::intrusive_ptr<c10d::Work> HostStagedBackend::recvAnysource(std::vector<at::Tensor>& tensors, int tag) {
  Staging staging = stage(pointers(tensors), "recv");
  auto hosts = staging.output(tensors);
  return staging.run(c10d::OpType::RECVANYSOURCE, tensors, [&] { return host_.recvAnysource(hosts, tag); });
}

c10::intrusive_ptr<c10d::Work> HostStagedBackend::barrier(const c10d::BarrierOptions& opts) {
  // On the device the caller named: the barrier passes once every rank's
  // stream has reached it, as NCCL's does.
  c10::DeviceIndex index = c10::cuda::current_device();
  if (opts.device.has_value() && opts.device->has_index()) {
    index = opts.device->index();
  } else if (!opts.device_ids.empty()) {
    index = static_cast<c10::DeviceIndex>(opts.device_ids[0]);
  }
  c10::Device device(c10::kCUDA, index);
  Staging staging(device, streamFor(device), rank_);
  c10d::BarrierOptions hostOptions;
  hostOptions.timeout = opts.timeout;
  return staging.run(c10d::OpType::BARRIER, {}, [&] { return host_.barrier(hostOptions); });
}

} // namespace monarch::gpu
