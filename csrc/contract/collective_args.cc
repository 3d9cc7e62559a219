#include "contract/collective_args.h"

#include <string>

namespace monarch {

void checkMatchesInput(const at::Tensor& expected, const at::Tensor& got, const char* op, const char* what) {
  TORCH_CHECK_TYPE(
      got.scalar_type() == expected.scalar_type(), op, ": ", what, " has dtype ", got.scalar_type(),
      " but the input has dtype ", expected.scalar_type());
  TORCH_CHECK_VALUE(
      got.numel() == expected.numel(), op, ": ", what, " has ", got.numel(), " elements but the input has ",
      expected.numel());
}

const at::Tensor& theOnlyTensor(const std::vector<at::Tensor>& tensors, const char* op) {
  TORCH_CHECK_VALUE(
      tensors.size() == 1, op, ": the monarch backend takes exactly one tensor per rank, got ", tensors.size());
  return tensors[0];
}

void checkDenseAllreduce(const c10d::AllreduceOptions& opts) {
  TORCH_CHECK_VALUE(!opts.sparseIndices.has_value(), "allreduce: sparse tensors are not supported");
}

const std::vector<at::Tensor>& allgatherOutputs(
    const std::vector<std::vector<at::Tensor>>& outputs, const at::Tensor& input, int size, LikeCheck like) {
  TORCH_CHECK_VALUE(outputs.size() == 1, "allgather: expected one output list, got ", outputs.size());
  TORCH_CHECK_VALUE(
      static_cast<int>(outputs[0].size()) == size, "allgather: the output list has ", outputs[0].size(),
      " tensors, expected one per rank (", size, ")");
  for (const auto& output : outputs[0]) {
    like(input, output, "allgather", "an output tensor");
  }
  return outputs[0];
}

namespace {

// Pairs outputs[i], inputs[i] of one dtype in which one side, the whole
// (`outputIsWhole`: the output), holds `size` blocks the size of the other.
void checkWholeAndBlock(
    const std::vector<at::Tensor>& outputs, const std::vector<at::Tensor>& inputs, int size, const char* op,
    bool outputIsWhole) {
  TORCH_CHECK_VALUE(
      outputs.size() == inputs.size(), op, ": ", outputs.size(), " outputs for ", inputs.size(), " inputs");
  const char* wholeName = outputIsWhole ? "output" : "input";
  const char* blockName = outputIsWhole ? "input" : "output";
  for (size_t i = 0; i < inputs.size(); ++i) {
    TORCH_CHECK_TYPE(
        outputs[i].scalar_type() == inputs[i].scalar_type(), op, ": output dtype ", outputs[i].scalar_type(),
        " differs from input dtype ", inputs[i].scalar_type());
    const at::Tensor& whole = outputIsWhole ? outputs[i] : inputs[i];
    const at::Tensor& block = outputIsWhole ? inputs[i] : outputs[i];
    TORCH_CHECK_VALUE(
        whole.numel() == size * block.numel(), op, ": ", wholeName, " has ", whole.numel(),
        " elements, expected group size x ", blockName, " = ", size * block.numel());
  }
}

} // namespace

void checkAllgatherIntoTensor(const std::vector<at::Tensor>& outputs, const std::vector<at::Tensor>& inputs, int size) {
  checkWholeAndBlock(outputs, inputs, size, "all_gather_into_tensor", /*outputIsWhole=*/true);
}

void checkAllgatherCoalesced(
    const std::vector<std::vector<at::Tensor>>& outputLists, const std::vector<at::Tensor>& inputs, int size, LikeCheck like) {
  TORCH_CHECK_VALUE(
      static_cast<int>(outputLists.size()) == size, "allgather_coalesced: expected one output list per rank (", size,
      "), got ", outputLists.size());
  for (const auto& list : outputLists) {
    TORCH_CHECK_VALUE(
        list.size() == inputs.size(), "allgather_coalesced: an output list has ", list.size(), " tensors, expected ",
        inputs.size());
    for (size_t i = 0; i < list.size(); ++i) {
      like(inputs[i], list[i], "allgather_coalesced", "an output tensor");
    }
  }
}

namespace {

// The root's one list of one tensor per rank, each like `reference`; other
// ranks pass none. `what` is "output" or "input".
std::vector<at::Tensor> rootList(
    const std::vector<std::vector<at::Tensor>>& lists, const at::Tensor& reference, int rank, int root, int size,
    LikeCheck like, const char* op, const char* what) {
  if (rank != root) {
    TORCH_CHECK_VALUE(
        lists.empty() || (lists.size() == 1 && lists[0].empty()), op, ": only the root rank may pass ", what,
        " tensors");
    return {};
  }
  TORCH_CHECK_VALUE(
      lists.size() == 1 && static_cast<int>(lists[0].size()) == size, op, ": the root needs one ", what,
      " list with one tensor per rank (", size, ")");
  const std::string tensorName = std::string("an ") + what + " tensor";
  for (const auto& tensor : lists[0]) {
    like(reference, tensor, op, tensorName.c_str());
  }
  return lists[0];
}

} // namespace

std::vector<at::Tensor> gatherOutputs(
    const std::vector<std::vector<at::Tensor>>& outputs, const at::Tensor& input, int rank, int root, int size,
    LikeCheck like) {
  return rootList(outputs, input, rank, root, size, like, "gather", "output");
}

std::vector<at::Tensor> scatterInputs(
    const std::vector<std::vector<at::Tensor>>& inputs, const at::Tensor& output, int rank, int root, int size,
    LikeCheck like) {
  return rootList(inputs, output, rank, root, size, like, "scatter", "input");
}

const std::vector<at::Tensor>& reduceScatterInputs(
    const std::vector<std::vector<at::Tensor>>& inputs, const at::Tensor& output, int size, LikeCheck like) {
  TORCH_CHECK_VALUE(
      inputs.size() == 1 && static_cast<int>(inputs[0].size()) == size,
      "reduce_scatter: expected one input list with one tensor per rank (", size, ")");
  for (const auto& input : inputs[0]) {
    like(output, input, "reduce_scatter", "an input tensor");
  }
  return inputs[0];
}

void checkReduceScatterTensor(const std::vector<at::Tensor>& outputs, const std::vector<at::Tensor>& inputs, int size) {
  checkWholeAndBlock(outputs, inputs, size, "reduce_scatter_tensor", /*outputIsWhole=*/false);
}

std::vector<size_t> alltoallRows(const at::Tensor& tensor, const std::vector<int64_t>& splits, int size, const char* which) {
  int64_t rows = tensor.dim() == 0 ? 1 : tensor.size(0);
  std::vector<size_t> out;
  if (splits.empty()) {
    TORCH_CHECK_VALUE(
        rows % size == 0, "alltoall_base: ", which, " has ", rows, " rows, not divisible by the group size ", size);
    out.assign(size, static_cast<size_t>(rows / size));
    return out;
  }
  TORCH_CHECK_VALUE(
      static_cast<int>(splits.size()) == size, "alltoall_base: ", which, " split sizes have ", splits.size(),
      " entries, expected one per rank (", size, ")");
  int64_t total = 0;
  for (int64_t split : splits) {
    TORCH_CHECK_VALUE(split >= 0, "alltoall_base: negative ", which, " split size ", split);
    total += split;
    out.push_back(static_cast<size_t>(split));
  }
  TORCH_CHECK_VALUE(
      total == rows, "alltoall_base: ", which, " split sizes add up to ", total, " but the tensor has ", rows, " rows");
  return out;
}

void checkAlltoallBaseTypes(const at::Tensor& output, const at::Tensor& input) {
  TORCH_CHECK_TYPE(
      input.scalar_type() == output.scalar_type(), "alltoall_base: input dtype ", input.scalar_type(),
      " differs from output dtype ", output.scalar_type());
}

void checkAlltoallLists(const std::vector<at::Tensor>& outputs, const std::vector<at::Tensor>& inputs, int size) {
  TORCH_CHECK_VALUE(
      static_cast<int>(inputs.size()) == size && static_cast<int>(outputs.size()) == size,
      "alltoall: expected one input and one output tensor per rank (", size, "), got ", inputs.size(), " and ",
      outputs.size());
  for (const auto& output : outputs) {
    TORCH_CHECK_TYPE(
        output.scalar_type() == inputs[0].scalar_type(), "alltoall: output dtype ", output.scalar_type(),
        " differs from input dtype ", inputs[0].scalar_type());
  }
}

} // namespace monarch
