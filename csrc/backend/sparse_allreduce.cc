// SUM allreduce of sparse COO tensors on the CPU, with Gloo's result: every
// rank's coalesced entries are gathered in rank order and coalesced again,
// which sums the values of indices that several ranks hold.

#include <numeric>

#include "backend/monarch_backend.h"
#include "contract/tensor_args.h"

namespace monarch {

namespace {

// Gathers every rank's rows of `mine` ([rows, ...], contiguous) into one
// tensor, rank by rank, where rank p holds `rows[p]` of them.
at::Tensor allgatherRows(GroupLinks& links, const at::Tensor& mine, const std::vector<int64_t>& rows, const AlgorithmConfig& config) {
  const int64_t total = std::accumulate(rows.begin(), rows.end(), int64_t{0});
  std::vector<int64_t> shape = mine.sizes().vec();
  shape[0] = total;
  at::Tensor all = at::empty(shape, mine.options());
  const int64_t rowElements = c10::multiply_integers(mine.sizes().slice(1));
  std::vector<size_t> counts;
  int64_t before = 0;
  for (int peer = 0; peer < static_cast<int>(rows.size()); ++peer) {
    counts.push_back(static_cast<size_t>(rows[peer] * rowElements));
    before += peer < links.rank() ? rows[peer] : 0;
  }
  if (mine.size(0) > 0) {
    all.narrow(0, before, mine.size(0)).copy_(mine);
  }
  ::monarch::allgather(links, all.data_ptr(), Partition::fromCounts(counts), wireElementBytes(mine), config);
  return all;
}

} // namespace

c10::intrusive_ptr<c10d::Work> MonarchBackend::allreduceSparse(at::Tensor tensor, const c10d::AllreduceOptions& opts) {
  TORCH_CHECK_NOT_IMPLEMENTED(
      tensor.device().is_cpu(), "allreduce: sparse tensors on ", tensor.device(),
      " are not supported by the monarch backend (sparse CPU tensors only)");
  TORCH_CHECK_VALUE(
      opts.reduceOp == c10d::ReduceOp::SUM, "allreduce: sparse tensors support only ReduceOp.SUM, got reduce op ",
      static_cast<int>(opts.reduceOp.op_));
  DataType type = reducibleType(tensor, "allreduce");
  at::Tensor local = tensor.coalesce();
  // Indices as rows ([nnz, sparse_dim]) so that ranks' entries concatenate.
  at::Tensor indices = local._indices().t().contiguous();
  at::Tensor values = local._values().contiguous();
  auto config = options_.algorithms;
  int r = rank_, n = size_;
  OpSignature signature;
  signature.op = OpCode::kSparseAllreduce;
  signature.dtype = type;
  signature.count = static_cast<uint64_t>(c10::multiply_integers(tensor.sizes()));
  signature.reduceOp = static_cast<uint8_t>(c10d::ReduceOp::SUM);
  return enqueue(
      c10d::OpType::ALLREDUCE, signature, {tensor}, {tensor, indices, values}, opts.timeout,
      [=](GroupLinks& links) mutable {
        std::vector<int64_t> rows(n, 0);
        rows[r] = values.size(0);
        ::monarch::allgather(links, rows.data(), Partition::fromCounts(std::vector<size_t>(n, 1)), sizeof(int64_t), config);
        at::Tensor allIndices = allgatherRows(links, indices, rows, config);
        at::Tensor allValues = allgatherRows(links, values, rows, config);
        at::Tensor sum = at::sparse_coo_tensor(allIndices.t(), allValues, tensor.sizes()).coalesce();
        tensor.copy_(sum);
      });
}

} // namespace monarch
