// The collectives of the c10d::Backend interface on CPU tensors: check the
// arguments on the caller's thread, stage the data into contiguous buffers,
// and enqueue the algorithm for the worker thread.

#include "algorithms/reduce_kernels.h"
#include "backend/monarch_backend.h"
#include "contract/collective_args.h"
#include "contract/tensor_args.h"

namespace monarch {

namespace {

// Copies `buffer` back into `tensor` when staging made a separate copy.
void copyBackIfStaged(at::Tensor& tensor, const at::Tensor& buffer) {
  if (!buffer.is_same(tensor)) {
    tensor.copy_(buffer.view(tensor.sizes()));
  }
}

OpSignature signatureFor(OpCode op, DataType type, uint64_t count, int64_t root = -1, uint8_t reduceOp = kNoReduceOp) {
  OpSignature signature;
  signature.op = op;
  signature.dtype = type;
  signature.count = count;
  signature.root = static_cast<int32_t>(root);
  signature.reduceOp = reduceOp;
  return signature;
}

Partition scaled(const std::vector<size_t>& counts, size_t unit) {
  std::vector<size_t> bytes;
  for (size_t count : counts) {
    bytes.push_back(count * unit);
  }
  return Partition::fromCounts(bytes);
}

std::vector<size_t> numels(const std::vector<at::Tensor>& tensors) {
  std::vector<size_t> counts;
  for (const auto& tensor : tensors) {
    counts.push_back(static_cast<size_t>(tensor.numel()));
  }
  return counts;
}

// The end of a reduction: AVG's division, on the group's threads where the
// kernel has the dtype. A torch div_ on the worker would leave torch's idle
// OpenMP threads spinning into the next op, on the cores that the group's
// helpers use (benchmarks/RESULTS.md, issue 28).
void finishReduction(const ReductionPlan& plan, at::Tensor& result, int n, DataType type, const AlgorithmConfig& config) {
  if (plan.average && dividesInPlace(type) && result.is_contiguous()) {
    divideInPlace(result.data_ptr(), static_cast<size_t>(result.numel()), type, n, config.helpers);
  } else {
    plan.after(result, n);
  }
}

// All tensors share the first one's dtype and live on the CPU.
void checkUniform(const std::vector<at::Tensor>& tensors, const char* op, const char* what) {
  TORCH_CHECK_VALUE(!tensors.empty(), op, ": ", what, " is empty");
  for (const auto& tensor : tensors) {
    checkCpuTensor(tensor, op);
    TORCH_CHECK_TYPE(
        tensor.scalar_type() == tensors[0].scalar_type(), op, ": ", what, " mixes dtypes ", tensors[0].scalar_type(),
        " and ", tensor.scalar_type());
  }
}

} // namespace

c10::intrusive_ptr<c10d::Work> MonarchBackend::broadcast(std::vector<at::Tensor>& tensors, const c10d::BroadcastOptions& opts) {
  if (device_.wants(tensors)) return device_.get().broadcast(tensors, opts);
  at::Tensor tensor = singleTensor(tensors, "broadcast");
  checkRoot(opts.rootRank, size_, "broadcast");
  TORCH_CHECK_VALUE(opts.rootTensor == 0, "broadcast: invalid root tensor ", opts.rootTensor);
  at::Tensor buffer = tensor.contiguous();
  auto config = options_.algorithms;
  int root = static_cast<int>(opts.rootRank);
  return enqueue(
      c10d::OpType::BROADCAST, signatureFor(OpCode::kBroadcast, wireType(tensor), wireCount(tensor), root), {tensor},
      {tensor, buffer}, opts.timeout, [=](GroupLinks& links) mutable {
        ::monarch::broadcast(links, buffer.data_ptr(), buffer.nbytes(), root, config);
        copyBackIfStaged(tensor, buffer);
      });
}

c10::intrusive_ptr<c10d::Work> MonarchBackend::allreduce(std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) {
  if (device_.wants(tensors)) return device_.get().allreduce(tensors, opts);
  if (theOnlyTensor(tensors, "allreduce").is_sparse()) {
    return allreduceSparse(tensors[0], opts);
  }
  at::Tensor tensor = singleTensor(tensors, "allreduce");
  checkDenseAllreduce(opts);
  DataType type = reducibleType(tensor, "allreduce");
  ReductionPlan plan = planReduction(opts.reduceOp, type, "allreduce");
  at::Tensor buffer = tensor.contiguous();
  auto config = options_.algorithms;
  int n = size_;
  return enqueue(
      c10d::OpType::ALLREDUCE, signatureFor(OpCode::kAllreduce, type, tensor.numel(), -1, plan.wireOp), {tensor},
      {tensor, buffer}, opts.timeout, [=](GroupLinks& links) mutable {
        plan.before(buffer);
        ::monarch::allreduce(links, buffer.data_ptr(), buffer.numel(), type, plan.kind, config);
        finishReduction(plan, buffer, n, type, config);
        copyBackIfStaged(tensor, buffer);
      });
}

c10::intrusive_ptr<c10d::Work> MonarchBackend::allreduce_sparse(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) {
  if (device_.wants(tensors)) return device_.get().allreduce_sparse(tensors, opts);
  return allreduceSparse(theOnlyTensor(tensors, "allreduce_sparse"), opts);
}

c10::intrusive_ptr<c10d::Work> MonarchBackend::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  if (device_.wants(tensors)) return device_.get().allreduce_coalesced(tensors, opts);
  checkUniform(tensors, "allreduce_coalesced", "the tensor list");
  DataType type = reducibleType(tensors[0], "allreduce_coalesced");
  ReductionPlan plan = planReduction(opts.reduceOp, type, "allreduce_coalesced");
  at::Tensor flat = flattenAll(tensors);
  auto config = options_.algorithms;
  int n = size_;
  std::vector<at::Tensor> keep = tensors;
  keep.push_back(flat);
  return enqueue(
      c10d::OpType::ALLREDUCE_COALESCED, signatureFor(OpCode::kAllreduce, type, flat.numel(), -1, plan.wireOp), tensors,
      keep, opts.timeout, [=, outputs = tensors](GroupLinks& links) mutable {
        plan.before(flat);
        ::monarch::allreduce(links, flat.data_ptr(), flat.numel(), type, plan.kind, config);
        finishReduction(plan, flat, n, type, config);
        unflattenInto(flat, outputs);
      });
}

c10::intrusive_ptr<c10d::Work> MonarchBackend::reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) {
  if (device_.wants(tensors)) return device_.get().reduce(tensors, opts);
  at::Tensor tensor = singleTensor(tensors, "reduce");
  checkRoot(opts.rootRank, size_, "reduce");
  DataType type = reducibleType(tensor, "reduce");
  ReductionPlan plan = planReduction(opts.reduceOp, type, "reduce");
  int root = static_cast<int>(opts.rootRank);
  // Only the root's tensor receives the result; the algorithm only reads
  // the others', unless the reduce op scales them first (plan.before).
  const bool scales = plan.factor.has_value() || plan.factorTensor.has_value();
  at::Tensor buffer = rank_ != root && scales ? tensor.clone(at::MemoryFormat::Contiguous) : tensor.contiguous();
  auto config = options_.algorithms;
  int n = size_;
  bool isRoot = rank_ == root;
  return enqueue(
      c10d::OpType::REDUCE, signatureFor(OpCode::kReduce, type, tensor.numel(), root, plan.wireOp), {tensor},
      {tensor, buffer}, opts.timeout, [=](GroupLinks& links) mutable {
        plan.before(buffer);
        ::monarch::reduce(links, buffer.data_ptr(), buffer.numel(), type, plan.kind, root, config);
        if (isRoot) {
          finishReduction(plan, buffer, n, type, config);
          copyBackIfStaged(tensor, buffer);
        }
      });
}

c10::intrusive_ptr<c10d::Work> MonarchBackend::allgather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs, const c10d::AllgatherOptions& opts) {
  if (device_.wants(outputs, inputs)) return device_.get().allgather(outputs, inputs, opts);
  at::Tensor input = singleTensor(inputs, "allgather");
  allgatherOutputs(outputs, input, size_, checkSameLayout);
  at::Tensor flat = at::empty({size_ * input.numel()}, input.options());
  at::Tensor source = input.contiguous();
  size_t count = wireCount(input);
  size_t elem = wireElementBytes(input);
  auto config = options_.algorithms;
  int n = size_;
  std::vector<at::Tensor> keep = outputs[0];
  keep.push_back(source);
  keep.push_back(flat);
  return enqueue(
      c10d::OpType::ALLGATHER, signatureFor(OpCode::kAllgather, wireType(input), count), outputs[0], keep,
      opts.timeout, [=, outs = outputs[0]](GroupLinks& links) mutable {
        ::monarch::allgatherFrom(
            links, source.data_ptr(), flat.data_ptr(), Partition::fromCounts(std::vector<size_t>(n, count)), elem, config);
        unflattenInto(flat, outs);
      });
}

c10::intrusive_ptr<c10d::Work> MonarchBackend::_allgather_base(
    at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions& opts) {
  if (device_.wants(output, input)) return device_.get()._allgather_base(output, input, opts);
  std::vector<at::Tensor> outputs{output};
  std::vector<at::Tensor> inputs{input};
  return allgather_into_tensor_coalesced(outputs, inputs, opts);
}

c10::intrusive_ptr<c10d::Work> MonarchBackend::allgather_into_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs, const c10d::AllgatherOptions& opts) {
  if (device_.wants(outputs, inputs)) return device_.get().allgather_into_tensor_coalesced(outputs, inputs, opts);
  checkUniform(inputs, "all_gather_into_tensor", "the input list");
  checkAllgatherIntoTensor(outputs, inputs, size_);
  // Each input is read where it lies (it may be this rank's block of its
  // output already): no torch copy on the worker (allgatherFrom).
  std::vector<at::Tensor> sources;
  std::vector<at::Tensor> buffers;
  uint64_t total = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    checkCpuTensor(outputs[i], "all_gather_into_tensor");
    sources.push_back(inputs[i].contiguous());
    buffers.push_back(outputs[i].contiguous());
    total += wireCount(inputs[i]);
  }
  auto config = options_.algorithms;
  int n = size_;
  std::vector<at::Tensor> keep = outputs;
  keep.insert(keep.end(), sources.begin(), sources.end());
  keep.insert(keep.end(), buffers.begin(), buffers.end());
  return enqueue(
      c10d::OpType::_ALLGATHER_BASE, signatureFor(OpCode::kAllgather, wireType(inputs[0]), total), outputs, keep,
      opts.timeout, [=, outs = outputs](GroupLinks& links) mutable {
        for (size_t i = 0; i < sources.size(); ++i) {
          size_t count = wireCount(sources[i]);
          size_t elem = wireElementBytes(sources[i]);
          ::monarch::allgatherFrom(
              links, sources[i].data_ptr(), buffers[i].data_ptr(), Partition::fromCounts(std::vector<size_t>(n, count)),
              elem, config);
          copyBackIfStaged(outs[i], buffers[i]);
        }
      });
}

c10::intrusive_ptr<c10d::Work> MonarchBackend::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& outputLists, std::vector<at::Tensor>& inputs, const c10d::AllgatherOptions& opts) {
  if (device_.wants(outputLists, inputs)) return device_.get().allgather_coalesced(outputLists, inputs, opts);
  checkUniform(inputs, "allgather_coalesced", "the input list");
  checkAllgatherCoalesced(outputLists, inputs, size_, checkSameLayout);
  at::Tensor mine = flattenAll(inputs);
  int64_t perRank = mine.numel();
  at::Tensor flat = at::empty({size_ * perRank}, mine.options());
  size_t count = wireCount(mine);
  size_t elem = wireElementBytes(mine);
  auto config = options_.algorithms;
  int n = size_;
  std::vector<at::Tensor> outputs;
  for (const auto& list : outputLists) {
    outputs.insert(outputs.end(), list.begin(), list.end());
  }
  std::vector<at::Tensor> keep = outputs;
  keep.push_back(mine);
  keep.push_back(flat);
  return enqueue(
      c10d::OpType::ALLGATHER_COALESCED, signatureFor(OpCode::kAllgather, wireType(mine), count), outputs, keep,
      opts.timeout, [=, outs = outputs](GroupLinks& links) mutable {
        ::monarch::allgatherFrom(
            links, mine.data_ptr(), flat.data_ptr(), Partition::fromCounts(std::vector<size_t>(n, count)), elem, config);
        unflattenInto(flat, outs);
      });
}

c10::intrusive_ptr<c10d::Work> MonarchBackend::gather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs, const c10d::GatherOptions& opts) {
  if (device_.wants(outputs, inputs)) return device_.get().gather(outputs, inputs, opts);
  at::Tensor input = singleTensor(inputs, "gather");
  checkRoot(opts.rootRank, size_, "gather");
  int root = static_cast<int>(opts.rootRank);
  std::vector<at::Tensor> outs = gatherOutputs(outputs, input, rank_, root, size_, checkSameLayout);
  at::Tensor staged = input.contiguous();
  // The root's outputs receive in place; a non-contiguous one through a copy.
  std::vector<at::Tensor> buffers;
  std::vector<void*> targets;
  for (const auto& out : outs) {
    buffers.push_back(out.contiguous());
    targets.push_back(buffers.back().data_ptr());
  }
  auto config = options_.algorithms;
  std::vector<at::Tensor> keep = buffers;
  keep.push_back(staged);
  return enqueue(
      c10d::OpType::GATHER, signatureFor(OpCode::kGather, wireType(input), wireCount(input), root), outs, keep,
      opts.timeout, [=](GroupLinks& links) mutable {
        ::monarch::gather(links, staged.data_ptr(), targets, staged.nbytes(), root, config);
        for (size_t i = 0; i < outs.size(); ++i) {
          copyBackIfStaged(outs[i], buffers[i]);
        }
      });
}

c10::intrusive_ptr<c10d::Work> MonarchBackend::scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs, const c10d::ScatterOptions& opts) {
  if (device_.wants(outputs, inputs)) return device_.get().scatter(outputs, inputs, opts);
  at::Tensor output = singleTensor(outputs, "scatter");
  checkRoot(opts.rootRank, size_, "scatter");
  int root = static_cast<int>(opts.rootRank);
  std::vector<at::Tensor> pieces = scatterInputs(inputs, output, rank_, root, size_, checkSameLayout);
  at::Tensor buffer = output.contiguous();
  std::vector<at::Tensor> keep{output, buffer};
  // The root's inputs are sent from where they lie (a non-contiguous one
  // from a copy).
  std::vector<const void*> sources;
  for (const auto& piece : pieces) {
    keep.push_back(piece.contiguous());
    sources.push_back(keep.back().data_ptr());
  }
  auto config = options_.algorithms;
  return enqueue(
      c10d::OpType::SCATTER, signatureFor(OpCode::kScatter, wireType(output), wireCount(output), root), {output}, keep,
      opts.timeout, [=](GroupLinks& links) mutable {
        ::monarch::scatter(links, sources, buffer.data_ptr(), buffer.nbytes(), root, config);
        copyBackIfStaged(output, buffer);
      });
}

c10::intrusive_ptr<c10d::Work> MonarchBackend::reduce_scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs, const c10d::ReduceScatterOptions& opts) {
  if (device_.wants(outputs, inputs)) return device_.get().reduce_scatter(outputs, inputs, opts);
  at::Tensor output = singleTensor(outputs, "reduce_scatter");
  const auto& pieces = reduceScatterInputs(inputs, output, size_, checkSameLayout);
  DataType type = reducibleType(output, "reduce_scatter");
  ReductionPlan plan = planReduction(opts.reduceOp, type, "reduce_scatter");
  at::Tensor flat = flattenAll(pieces);
  at::Tensor result = output.contiguous();
  auto config = options_.algorithms;
  int n = size_;
  return enqueue(
      c10d::OpType::REDUCE_SCATTER, signatureFor(OpCode::kReduceScatter, type, flat.numel(), -1, plan.wireOp), {output},
      {output, flat, result}, opts.timeout, [=](GroupLinks& links) mutable {
        plan.before(flat);
        Partition blocks = Partition::even(flat.numel(), n);
        ::monarch::reduceScatterInto(links, flat.data_ptr(), result.data_ptr(), blocks, type, plan.kind, config);
        finishReduction(plan, result, n, type, config);
        copyBackIfStaged(output, result);
      });
}

c10::intrusive_ptr<c10d::Work> MonarchBackend::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) {
  if (device_.wants(output, input)) return device_.get()._reduce_scatter_base(output, input, opts);
  std::vector<at::Tensor> outputs{output};
  std::vector<at::Tensor> inputs{input};
  return reduce_scatter_tensor_coalesced(outputs, inputs, opts);
}

c10::intrusive_ptr<c10d::Work> MonarchBackend::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs, const c10d::ReduceScatterOptions& opts) {
  if (device_.wants(outputs, inputs)) return device_.get().reduce_scatter_tensor_coalesced(outputs, inputs, opts);
  checkUniform(inputs, "reduce_scatter_tensor", "the input list");
  checkReduceScatterTensor(outputs, inputs, size_);
  DataType type = reducibleType(inputs[0], "reduce_scatter_tensor");
  ReductionPlan plan = planReduction(opts.reduceOp, type, "reduce_scatter_tensor");
  uint64_t total = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    checkCpuTensor(outputs[i], "reduce_scatter_tensor");
    total += inputs[i].numel();
  }
  // The reduction reads the inputs where they lie and writes the outputs:
  // no staging copy unless a premultiplied sum must scale a copy first.
  std::vector<at::Tensor> sources;
  std::vector<at::Tensor> results;
  for (size_t i = 0; i < inputs.size(); ++i) {
    at::Tensor source = inputs[i].contiguous();
    if (plan.factor || plan.factorTensor) {
      source = source.clone();
    }
    sources.push_back(source);
    results.push_back(outputs[i].contiguous());
  }
  auto config = options_.algorithms;
  int n = size_;
  std::vector<at::Tensor> keep = outputs;
  keep.insert(keep.end(), sources.begin(), sources.end());
  keep.insert(keep.end(), results.begin(), results.end());
  return enqueue(
      c10d::OpType::_REDUCE_SCATTER_BASE, signatureFor(OpCode::kReduceScatter, type, total, -1, plan.wireOp), outputs, keep,
      opts.timeout, [=, outs = outputs](GroupLinks& links) mutable {
        for (size_t i = 0; i < sources.size(); ++i) {
          plan.before(sources[i]);
          Partition blocks = Partition::fromCounts(std::vector<size_t>(n, static_cast<size_t>(outs[i].numel())));
          ::monarch::reduceScatterInto(
              links, sources[i].data_ptr(), results[i].data_ptr(), blocks, type, plan.kind, config);
          finishReduction(plan, results[i], n, type, config);
          copyBackIfStaged(outs[i], results[i]);
        }
      });
}

c10::intrusive_ptr<c10d::Work> MonarchBackend::alltoall_base(
    at::Tensor& output, at::Tensor& input, std::vector<int64_t>& outputSplitSizes,
    std::vector<int64_t>& inputSplitSizes, const c10d::AllToAllOptions& opts) {
  if (device_.wants(output, input)) return device_.get().alltoall_base(output, input, outputSplitSizes, inputSplitSizes, opts);
  checkCpuTensor(input, "alltoall_base");
  checkCpuTensor(output, "alltoall_base");
  checkAlltoallBaseTypes(output, input);
  auto sendRows = alltoallRows(input, inputSplitSizes, size_, "input");
  auto recvRows = alltoallRows(output, outputSplitSizes, size_, "output");
  int64_t inRows = input.dim() == 0 ? 1 : input.size(0);
  int64_t outRows = output.dim() == 0 ? 1 : output.size(0);
  size_t inRowBytes = inRows == 0 ? 0 : input.nbytes() / inRows;
  size_t outRowBytes = outRows == 0 ? 0 : output.nbytes() / outRows;
  TORCH_CHECK_VALUE(
      inRows == 0 || outRows == 0 || inRowBytes == outRowBytes,
      "alltoall_base: input and output rows differ in size (", inRowBytes, " vs ", outRowBytes, " bytes)");
  size_t rowBytes = std::max(inRowBytes, outRowBytes);
  at::Tensor in = input.contiguous();
  at::Tensor out = output.contiguous();
  Partition sendBlocks = scaled(sendRows, rowBytes);
  Partition recvBlocks = scaled(recvRows, rowBytes);
  uint64_t rowElements = rowBytes / std::max<size_t>(1, input.element_size());
  auto config = options_.algorithms;
  return enqueue(
      c10d::OpType::ALLTOALL_BASE, signatureFor(OpCode::kAlltoall, wireType(input), rowElements), {output},
      {output, in, out}, opts.timeout, [=](GroupLinks& links) mutable {
        ::monarch::alltoall(links, in.data_ptr(), sendBlocks, out.data_ptr(), recvBlocks, config);
        copyBackIfStaged(output, out);
      });
}

c10::intrusive_ptr<c10d::Work> MonarchBackend::alltoall(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs, const c10d::AllToAllOptions& opts) {
  if (device_.wants(outputs, inputs)) return device_.get().alltoall(outputs, inputs, opts);
  checkUniform(inputs, "alltoall", "the input list");
  checkUniform(outputs, "alltoall", "the output list");
  checkAlltoallLists(outputs, inputs, size_);
  at::Tensor in = flattenAll(inputs);
  auto recvCounts = numels(outputs);
  size_t totalOut = 0;
  for (size_t count : recvCounts) {
    totalOut += count;
  }
  at::Tensor out = at::empty({static_cast<int64_t>(totalOut)}, outputs[0].options());
  size_t elem = in.element_size();
  Partition sendBlocks = scaled(numels(inputs), elem);
  Partition recvBlocks = scaled(recvCounts, elem);
  std::vector<at::Tensor> keep = outputs;
  keep.push_back(in);
  keep.push_back(out);
  auto config = options_.algorithms;
  return enqueue(
      c10d::OpType::ALLTOALL, signatureFor(OpCode::kAlltoall, wireType(inputs[0]), 0), outputs, keep, opts.timeout,
      [=, outs = outputs](GroupLinks& links) mutable {
        ::monarch::alltoall(links, in.data_ptr(), sendBlocks, out.data_ptr(), recvBlocks, config);
        unflattenInto(out, outs);
      });
}

c10::intrusive_ptr<c10d::Work> MonarchBackend::barrier(const c10d::BarrierOptions& opts) {
  if (device_.wants(opts)) return device_.get().barrier(opts);
  return enqueue(
      c10d::OpType::BARRIER, signatureFor(OpCode::kBarrier, DataType::kUInt8, 0), {}, {}, opts.timeout,
      [](GroupLinks& links) { ::monarch::barrier(links); });
}

} // namespace monarch
