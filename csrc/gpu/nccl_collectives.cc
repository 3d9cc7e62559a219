// The collectives of the c10d::Backend interface on GPU tensors. Each checks
// its arguments on the caller's thread, stages non-contiguous inputs on the
// caller's stream, and launches NCCL calls on the communicator's stream;
// results for non-contiguous outputs are copied back on that stream. Data
// movement ships bytes, so every dtype moves; reductions map dtypes and ops
// in nccl_types.cc. Collectives NCCL lacks (gather, scatter, all-to-all) are
// grouped send/recv.

#include <c10/cuda/CUDAFunctions.h>

#include "contract/collective_args.h"
#include "contract/tensor_args.h"
#include "gpu/compat.h"
#include "gpu/nccl_backend.h"

namespace monarch::gpu {

namespace {

void checkGpuTensor(const at::Tensor& tensor, const at::Device& device, const char* op) {
  TORCH_CHECK_VALUE(tensor.defined(), op, ": got an undefined tensor");
  TORCH_CHECK_VALUE(
      tensor.is_cuda(), op, ": mixes GPU tensors with a tensor on ", tensor.device(), "; all must be on ", device);
  TORCH_CHECK_VALUE(
      tensor.device() == device, op, ": got tensors on ", device, " and on ", tensor.device(),
      "; one op runs on one device");
  TORCH_CHECK_VALUE(
      tensor.layout() == at::kStrided, op, ": only dense (strided) tensors are supported, got ", tensor.layout());
}

// The device of the first tensor, which every other tensor must share.
at::Device commonDevice(std::initializer_list<const std::vector<at::Tensor>*> lists, const char* op) {
  const at::Tensor* first = nullptr;
  for (const auto* list : lists) {
    for (const auto& tensor : *list) {
      if (first == nullptr && tensor.defined()) {
        first = &tensor;
      }
    }
  }
  TORCH_CHECK_VALUE(first != nullptr, op, ": no tensors");
  at::Device device = first->device();
  for (const auto* list : lists) {
    for (const auto& tensor : *list) {
      checkGpuTensor(tensor, device, op);
    }
  }
  return device;
}

at::Tensor onlyTensor(const std::vector<at::Tensor>& tensors, const char* op) {
  const at::Tensor& tensor = theOnlyTensor(tensors, op);
  checkGpuTensor(tensor, tensor.device(), op);
  return tensor;
}

void checkLike(const at::Tensor& expected, const at::Tensor& got, const char* op, const char* what) {
  checkGpuTensor(got, expected.device(), op);
  checkMatchesInput(expected, got, op, what);
}

// Where NCCL writes an output: the tensor itself when it is contiguous,
// else a contiguous stand-in whose contents copyBack moves over.
at::Tensor outputBuffer(const at::Tensor& tensor) {
  return tensor.is_contiguous() ? tensor : at::empty_like(tensor, at::MemoryFormat::Contiguous);
}

std::vector<at::Tensor> outputBuffers(const std::vector<at::Tensor>& tensors) {
  std::vector<at::Tensor> buffers;
  for (const auto& tensor : tensors) {
    buffers.push_back(outputBuffer(tensor));
  }
  return buffers;
}

void copyBack(at::Tensor tensor, const at::Tensor& buffer) {
  if (!buffer.is_same(tensor)) {
    tensor.copy_(buffer);
  }
}

bool anyStaged(const std::vector<at::Tensor>& tensors, const std::vector<at::Tensor>& buffers) {
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (!buffers[i].is_same(tensors[i])) {
      return true;
    }
  }
  return false;
}

std::vector<at::Tensor> contiguousAll(const std::vector<at::Tensor>& tensors) {
  std::vector<at::Tensor> out;
  for (const auto& tensor : tensors) {
    out.push_back(tensor.contiguous());
  }
  return out;
}

std::vector<at::Tensor> concat(std::vector<at::Tensor> a, const std::vector<at::Tensor>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

char* bytePointer(const at::Tensor& tensor) {
  return static_cast<char*>(tensor.data_ptr());
}

// Byte sizes along dim 0 for alltoall_base: the given split sizes, or an even split.
std::vector<size_t> splitBytes(const at::Tensor& tensor, const std::vector<int64_t>& splits, int size, const char* which) {
  int64_t rows = tensor.dim() == 0 ? 1 : tensor.size(0);
  size_t rowBytes = rows == 0 ? 0 : tensor.nbytes() / rows;
  std::vector<size_t> bytes = alltoallRows(tensor, splits, size, which);
  for (auto& count : bytes) {
    count *= rowBytes;
  }
  return bytes;
}

} // namespace

c10::intrusive_ptr<c10d::Work> NcclBackend::broadcast(std::vector<at::Tensor>& tensors, const c10d::BroadcastOptions& opts) {
  at::Tensor tensor = onlyTensor(tensors, "broadcast");
  checkRoot(opts.rootRank, size_, "broadcast");
  at::Tensor buffer = tensor.contiguous();
  int root = static_cast<int>(opts.rootRank);
  return launch(
      {c10d::OpType::BROADCAST, "broadcast", tensor.device(), {tensor}, {buffer}, opts.timeout},
      [=](GroupCalls& group, int) { group.broadcast(buffer.data_ptr(), buffer.data_ptr(), buffer.nbytes(), root); },
      buffer.is_same(tensor) ? std::function<void()>() : [=] { copyBack(tensor, buffer); });
}

c10::intrusive_ptr<c10d::Work> NcclBackend::allreduce(std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) {
  at::Tensor tensor = onlyTensor(tensors, "allreduce");
  checkDenseAllreduce(opts);
  checkReducible(tensor, opts.reduceOp, "allreduce");
  at::Tensor buffer = tensor.contiguous();
  c10d::ReduceOp op = opts.reduceOp;
  return launch(
      {c10d::OpType::ALLREDUCE, "allreduce", tensor.device(), {tensor}, {buffer}, opts.timeout},
      [=](GroupCalls& group, int) {
        NcclReduction reduction = group.reduction(buffer, op);
        group.allReduce(buffer.data_ptr(), buffer.data_ptr(), reductionCount(buffer, reduction), reduction);
      },
      buffer.is_same(tensor) ? std::function<void()>() : [=] { copyBack(tensor, buffer); });
}

c10::intrusive_ptr<c10d::Work> NcclBackend::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  at::Device device = commonDevice({&tensors}, "allreduce_coalesced");
  for (const auto& tensor : tensors) {
    checkReducible(tensor, opts.reduceOp, "allreduce_coalesced");
  }
  std::vector<at::Tensor> buffers = contiguousAll(tensors);
  c10d::ReduceOp op = opts.reduceOp;
  return launch(
      {c10d::OpType::ALLREDUCE_COALESCED, "allreduce_coalesced", device, tensors, buffers, opts.timeout},
      [=](GroupCalls& group, int) {
        for (const auto& buffer : buffers) {
          NcclReduction reduction = group.reduction(buffer, op);
          group.allReduce(buffer.data_ptr(), buffer.data_ptr(), reductionCount(buffer, reduction), reduction);
        }
      },
      !anyStaged(tensors, buffers) ? std::function<void()>() : [=] {
        for (size_t i = 0; i < tensors.size(); ++i) {
          copyBack(tensors[i], buffers[i]);
        }
      });
}

c10::intrusive_ptr<c10d::Work> NcclBackend::reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) {
  at::Tensor tensor = onlyTensor(tensors, "reduce");
  checkRoot(opts.rootRank, size_, "reduce");
  checkReducible(tensor, opts.reduceOp, "reduce");
  int root = static_cast<int>(opts.rootRank);
  // NCCL writes the result only on the root; other ranks' tensors stay as they are.
  at::Tensor buffer = tensor.contiguous();
  c10d::ReduceOp op = opts.reduceOp;
  bool isRoot = rank_ == root;
  return launch(
      {c10d::OpType::REDUCE, "reduce", tensor.device(), {tensor}, {buffer}, opts.timeout},
      [=](GroupCalls& group, int) {
        NcclReduction reduction = group.reduction(buffer, op);
        group.reduce(buffer.data_ptr(), buffer.data_ptr(), reductionCount(buffer, reduction), reduction, root);
      },
      buffer.is_same(tensor) || !isRoot ? std::function<void()>() : [=] { copyBack(tensor, buffer); });
}

c10::intrusive_ptr<c10d::Work> NcclBackend::allgather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs, const c10d::AllgatherOptions& opts) {
  at::Tensor input = onlyTensor(inputs, "allgather");
  std::vector<at::Tensor> outs = allgatherOutputs(outputs, input, size_, checkLike);
  at::Tensor in = input.contiguous();
  at::Tensor flat = at::empty({size_ * input.numel()}, input.options());
  int64_t numel = input.numel();
  return launch(
      {c10d::OpType::ALLGATHER, "allgather", input.device(), outs, {in, flat}, opts.timeout},
      [=](GroupCalls& group, int) { group.allGather(in.data_ptr(), flat.data_ptr(), in.nbytes()); },
      [=] {
        for (size_t r = 0; r < outs.size(); ++r) {
          copyBack(outs[r], flat.narrow(0, static_cast<int64_t>(r) * numel, numel).view(outs[r].sizes()));
        }
      });
}

c10::intrusive_ptr<c10d::Work> NcclBackend::_allgather_base(
    at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions& opts) {
  std::vector<at::Tensor> outputs{output};
  std::vector<at::Tensor> inputs{input};
  return allgather_into_tensor_coalesced(outputs, inputs, opts);
}

c10::intrusive_ptr<c10d::Work> NcclBackend::allgather_into_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs, const c10d::AllgatherOptions& opts) {
  at::Device device = commonDevice({&inputs, &outputs}, "all_gather_into_tensor");
  checkAllgatherIntoTensor(outputs, inputs, size_);
  std::vector<at::Tensor> ins = contiguousAll(inputs);
  std::vector<at::Tensor> outs = outputBuffers(outputs);
  return launch(
      {c10d::OpType::_ALLGATHER_BASE, "all_gather_into_tensor", device, outputs, concat(ins, outs), opts.timeout},
      [=](GroupCalls& group, int) {
        for (size_t i = 0; i < ins.size(); ++i) {
          group.allGather(ins[i].data_ptr(), outs[i].data_ptr(), ins[i].nbytes());
        }
      },
      !anyStaged(outputs, outs) ? std::function<void()>() : [=] {
        for (size_t i = 0; i < outputs.size(); ++i) {
          copyBack(outputs[i], outs[i]);
        }
      });
}

c10::intrusive_ptr<c10d::Work> NcclBackend::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& outputLists, std::vector<at::Tensor>& inputs, const c10d::AllgatherOptions& opts) {
  at::Device device = commonDevice({&inputs}, "allgather_coalesced");
  checkAllgatherCoalesced(outputLists, inputs, size_, checkLike);
  std::vector<at::Tensor> outputs;
  for (const auto& list : outputLists) {
    outputs.insert(outputs.end(), list.begin(), list.end());
  }
  // Each rank's inputs travel as one block of bytes, whatever their dtypes.
  std::vector<at::Tensor> bytes;
  for (const auto& input : inputs) {
    bytes.push_back(input.contiguous().view(-1).view(at::kByte));
  }
  at::Tensor mine = at::cat(bytes);
  int64_t perRank = mine.numel();
  at::Tensor flat = at::empty({size_ * perRank}, mine.options());
  std::vector<at::Tensor> ins = inputs;
  return launch(
      {c10d::OpType::ALLGATHER_COALESCED, "allgather_coalesced", device, outputs, {mine, flat}, opts.timeout},
      [=](GroupCalls& group, int) { group.allGather(mine.data_ptr(), flat.data_ptr(), mine.nbytes()); },
      [=, size = size_] {
        size_t index = 0;
        for (int r = 0; r < size; ++r) {
          int64_t offset = r * perRank;
          for (const auto& input : ins) {
            int64_t n = static_cast<int64_t>(input.nbytes());
            copyBack(outputs[index++], flat.narrow(0, offset, n).view(input.scalar_type()).view(input.sizes()));
            offset += n;
          }
        }
      });
}

c10::intrusive_ptr<c10d::Work> NcclBackend::gather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs, const c10d::GatherOptions& opts) {
  at::Tensor input = onlyTensor(inputs, "gather");
  checkRoot(opts.rootRank, size_, "gather");
  int root = static_cast<int>(opts.rootRank);
  bool isRoot = rank_ == root;
  std::vector<at::Tensor> outs = gatherOutputs(outputs, input, rank_, root, size_, checkLike);
  at::Tensor in = input.contiguous();
  std::vector<at::Tensor> buffers = outputBuffers(outs);
  int self = rank_;
  return launch(
      {c10d::OpType::GATHER, "gather", input.device(), outs, concat({in}, buffers), opts.timeout},
      [=](GroupCalls& group, int) {
        if (!isRoot) {
          group.send(in.data_ptr(), in.nbytes(), root);
          return;
        }
        for (int r = 0; r < static_cast<int>(buffers.size()); ++r) {
          if (r != self) {
            group.recv(buffers[r].data_ptr(), buffers[r].nbytes(), r);
          }
        }
      },
      !isRoot ? std::function<void()>() : [=] {
        copyBack(outs[self], in.view(outs[self].sizes()));
        for (size_t r = 0; r < outs.size(); ++r) {
          if (static_cast<int>(r) != self) {
            copyBack(outs[r], buffers[r]);
          }
        }
      });
}

c10::intrusive_ptr<c10d::Work> NcclBackend::scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs, const c10d::ScatterOptions& opts) {
  at::Tensor output = onlyTensor(outputs, "scatter");
  checkRoot(opts.rootRank, size_, "scatter");
  int root = static_cast<int>(opts.rootRank);
  bool isRoot = rank_ == root;
  std::vector<at::Tensor> ins = contiguousAll(scatterInputs(inputs, output, rank_, root, size_, checkLike));
  at::Tensor out = outputBuffer(output);
  int self = rank_;
  return launch(
      {c10d::OpType::SCATTER, "scatter", output.device(), {output}, concat({out}, ins), opts.timeout},
      [=](GroupCalls& group, int) {
        if (!isRoot) {
          group.recv(out.data_ptr(), out.nbytes(), root);
          return;
        }
        for (int r = 0; r < static_cast<int>(ins.size()); ++r) {
          if (r != self) {
            group.send(ins[r].data_ptr(), ins[r].nbytes(), r);
          }
        }
      },
      [=] {
        if (isRoot) {
          copyBack(output, ins[self].view(output.sizes()));
        } else {
          copyBack(output, out);
        }
      });
}

c10::intrusive_ptr<c10d::Work> NcclBackend::reduce_scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs, const c10d::ReduceScatterOptions& opts) {
  at::Tensor output = onlyTensor(outputs, "reduce_scatter");
  const auto& pieces = reduceScatterInputs(inputs, output, size_, checkLike);
  checkReducible(output, opts.reduceOp, "reduce_scatter");
  at::Tensor flat = flattenAll(pieces);
  at::Tensor out = outputBuffer(output);
  c10d::ReduceOp op = opts.reduceOp;
  return launch(
      {c10d::OpType::REDUCE_SCATTER, "reduce_scatter", output.device(), {output}, {flat, out}, opts.timeout},
      [=](GroupCalls& group, int) {
        NcclReduction reduction = group.reduction(flat, op);
        group.reduceScatter(flat.data_ptr(), out.data_ptr(), reductionCount(out, reduction), reduction);
      },
      out.is_same(output) ? std::function<void()>() : [=] { copyBack(output, out); });
}

c10::intrusive_ptr<c10d::Work> NcclBackend::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) {
  std::vector<at::Tensor> outputs{output};
  std::vector<at::Tensor> inputs{input};
  return reduce_scatter_tensor_coalesced(outputs, inputs, opts);
}

c10::intrusive_ptr<c10d::Work> NcclBackend::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs, const c10d::ReduceScatterOptions& opts) {
  at::Device device = commonDevice({&inputs, &outputs}, "reduce_scatter_tensor");
  checkReduceScatterTensor(outputs, inputs, size_);
  for (const auto& input : inputs) {
    checkReducible(input, opts.reduceOp, "reduce_scatter_tensor");
  }
  std::vector<at::Tensor> ins = contiguousAll(inputs);
  std::vector<at::Tensor> outs = outputBuffers(outputs);
  c10d::ReduceOp op = opts.reduceOp;
  return launch(
      {c10d::OpType::_REDUCE_SCATTER_BASE, "reduce_scatter_tensor", device, outputs, concat(ins, outs), opts.timeout},
      [=](GroupCalls& group, int) {
        for (size_t i = 0; i < ins.size(); ++i) {
          NcclReduction reduction = group.reduction(ins[i], op);
          group.reduceScatter(ins[i].data_ptr(), outs[i].data_ptr(), reductionCount(outs[i], reduction), reduction);
        }
      },
      !anyStaged(outputs, outs) ? std::function<void()>() : [=] {
        for (size_t i = 0; i < outputs.size(); ++i) {
          copyBack(outputs[i], outs[i]);
        }
      });
}

c10::intrusive_ptr<c10d::Work> NcclBackend::alltoall_base(
    at::Tensor& output, at::Tensor& input, std::vector<int64_t>& outputSplitSizes,
    std::vector<int64_t>& inputSplitSizes, const c10d::AllToAllOptions& opts) {
  std::vector<at::Tensor> tensors{input, output};
  at::Device device = commonDevice({&tensors}, "alltoall_base");
  checkAlltoallBaseTypes(output, input);
  std::vector<size_t> sendBytes = splitBytes(input, inputSplitSizes, size_, "input");
  std::vector<size_t> recvBytes = splitBytes(output, outputSplitSizes, size_, "output");
  TORCH_CHECK_VALUE(
      sendBytes[rank_] == recvBytes[rank_], "alltoall_base: this rank sends ", sendBytes[rank_],
      " bytes to itself but expects ", recvBytes[rank_]);
  at::Tensor in = input.contiguous();
  at::Tensor out = outputBuffer(output);
  int self = rank_;
  auto offsets = [](const std::vector<size_t>& sizes) {
    std::vector<size_t> starts(sizes.size(), 0);
    for (size_t i = 1; i < sizes.size(); ++i) {
      starts[i] = starts[i - 1] + sizes[i - 1];
    }
    return starts;
  };
  std::vector<size_t> sendAt = offsets(sendBytes);
  std::vector<size_t> recvAt = offsets(recvBytes);
  return launch(
      {c10d::OpType::ALLTOALL_BASE, "alltoall_base", device, {output}, {in, out}, opts.timeout},
      [=](GroupCalls& group, int) {
        for (int r = 0; r < static_cast<int>(sendBytes.size()); ++r) {
          if (r == self) {
            continue;
          }
          if (sendBytes[r] > 0) {
            group.send(bytePointer(in) + sendAt[r], sendBytes[r], r);
          }
          if (recvBytes[r] > 0) {
            group.recv(bytePointer(out) + recvAt[r], recvBytes[r], r);
          }
        }
      },
      [=] {
        // This rank's own block is a local copy, after the exchange.
        if (sendBytes[self] > 0) {
          at::Tensor from = in.view(-1).view(at::kByte).narrow(0, sendAt[self], sendBytes[self]);
          out.view(-1).view(at::kByte).narrow(0, recvAt[self], recvBytes[self]).copy_(from);
        }
        copyBack(output, out);
      });
}

c10::intrusive_ptr<c10d::Work> NcclBackend::alltoall(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs, const c10d::AllToAllOptions& opts) {
  at::Device device = commonDevice({&inputs, &outputs}, "alltoall");
  checkAlltoallLists(outputs, inputs, size_);
  TORCH_CHECK_VALUE(
      inputs[rank_].numel() == outputs[rank_].numel(), "alltoall: this rank sends ", inputs[rank_].numel(),
      " elements to itself but expects ", outputs[rank_].numel());
  std::vector<at::Tensor> ins = contiguousAll(inputs);
  std::vector<at::Tensor> outs = outputBuffers(outputs);
  int self = rank_;
  return launch(
      {c10d::OpType::ALLTOALL, "alltoall", device, outputs, concat(ins, outs), opts.timeout},
      [=](GroupCalls& group, int) {
        for (int r = 0; r < static_cast<int>(ins.size()); ++r) {
          if (r != self) {
            group.send(ins[r].data_ptr(), ins[r].nbytes(), r);
            group.recv(outs[r].data_ptr(), outs[r].nbytes(), r);
          }
        }
      },
      [=] {
        copyBack(outputs[self], ins[self].view(outputs[self].sizes()));
        for (size_t r = 0; r < outputs.size(); ++r) {
          if (static_cast<int>(r) != self) {
            copyBack(outputs[r], outs[r]);
          }
        }
      });
}

c10::intrusive_ptr<c10d::Work> NcclBackend::send(std::vector<at::Tensor>& tensors, int dstRank, int tag) {
  at::Tensor tensor = onlyTensor(tensors, "send");
  checkPeer(dstRank, rank_, size_, "send", "destination rank");
  at::Tensor buffer = tensor.contiguous();
  (void)tag; // NCCL matches sends and receives per pair in issue order
  Op op{c10d::OpType::SEND, "send", tensor.device(), {tensor}, {buffer}, c10d::kUnsetTimeout, dstRank};
  return launch(op, [=](GroupCalls& group, int peer) { group.send(buffer.data_ptr(), buffer.nbytes(), peer); });
}

c10::intrusive_ptr<c10d::Work> NcclBackend::recv(std::vector<at::Tensor>& tensors, int srcRank, int tag) {
  at::Tensor tensor = onlyTensor(tensors, "recv");
  checkPeer(srcRank, rank_, size_, "recv", "source rank");
  at::Tensor buffer = outputBuffer(tensor);
  (void)tag;
  Op op{c10d::OpType::RECV, "recv", tensor.device(), {tensor}, {buffer}, c10d::kUnsetTimeout, srcRank};
  return launch(
      op, [=](GroupCalls& group, int peer) { group.recv(buffer.data_ptr(), buffer.nbytes(), peer); },
      buffer.is_same(tensor) ? std::function<void()>() : [=] { copyBack(tensor, buffer); });
}

c10::intrusive_ptr<c10d::Work> NcclBackend::recvAnysource(std::vector<at::Tensor>& tensors, int /*tag*/) {
  onlyTensor(tensors, "recv");
  TORCH_CHECK_NOT_IMPLEMENTED(
      false, "recv: receiving GPU tensors from any source is not supported (", kCollectivesName,
      " has no wildcard receive); name the source rank");
}

c10::intrusive_ptr<c10d::Work> NcclBackend::barrier(const c10d::BarrierOptions& opts) {
  c10::DeviceIndex index;
  if (opts.device.has_value() && opts.device->is_cuda() && opts.device->has_index()) {
    index = opts.device->index();
  } else if (!opts.device_ids.empty()) {
    index = static_cast<c10::DeviceIndex>(opts.device_ids[0]);
  } else {
    index = c10::cuda::current_device();
  }
  at::Device device(at::kCUDA, index);
  at::Tensor flag = at::zeros({1}, at::TensorOptions().dtype(at::kByte).device(device));
  Op op{c10d::OpType::BARRIER, "barrier", device, {}, {flag}, opts.timeout, -1, /*blockHostOnWait=*/true};
  return launch(op, [=](GroupCalls& group, int) {
    NcclReduction sum;
    sum.type = ncclUint8;
    group.allReduce(flag.data_ptr(), flag.data_ptr(), 1, sum);
  });
}

} // namespace monarch::gpu
