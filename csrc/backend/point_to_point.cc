// Tagged send/recv. They bypass the collective queue: the transfer is posted
// on the caller's thread and the work completes when the link finishes it,
// so a pending recv never holds up the collectives behind it.

#include "backend/monarch_backend.h"
#include "contract/tensor_args.h"

namespace monarch {

c10::intrusive_ptr<c10d::Work> MonarchBackend::postPointToPoint(
    c10d::OpType type, at::Tensor& tensor, int peer, int tag) {
  const bool sending = type == c10d::OpType::SEND;
  OpSignature signature;
  signature.op = OpCode::kPointToPoint;
  signature.dtype = wireType(tensor);
  signature.count = wireCount(tensor);
  at::Tensor buffer = tensor.contiguous();
  auto timeout = timeoutFor(c10d::kUnsetTimeout);
  auto work = c10::make_intrusive<MonarchWork>(rank_, type, 0, std::vector<at::Tensor>{tensor}, timeout);
  auto keepalive = std::make_shared<std::vector<at::Tensor>>(std::vector<at::Tensor>{tensor, buffer});
  std::string what = std::string(sending ? "send to rank " : "recv from ") +
      (peer >= 0 ? (sending ? "" : "rank ") + std::to_string(peer) : "any rank") + " (tag " + std::to_string(tag) + ")";
  auto onComplete = [work, tensor, buffer, what, rank = rank_](const Status& status, int source) mutable {
    if (!status.ok()) {
      Status failed = status;
      failed.message = "rank " + std::to_string(rank) + ": " + what + " failed: " + errorKindName(status.kind) + ": " +
          status.message;
      work->markFailed(failed);
      return;
    }
    if (!buffer.is_same(tensor)) {
      tensor.copy_(buffer.view(tensor.sizes()));
    }
    work->markSuccess(source);
  };
  uint64_t wireTag = static_cast<uint64_t>(static_cast<int64_t>(tag));
  auto links = this->links();
  if (sending) {
    links->postTaggedSend(peer, wireTag, signature, buffer.data_ptr(), buffer.nbytes(), keepalive, onComplete);
  } else {
    links->postTaggedRecv(peer, wireTag, signature, buffer.data_ptr(), buffer.nbytes(), keepalive, onComplete);
  }
  return work;
}

c10::intrusive_ptr<c10d::Work> MonarchBackend::send(std::vector<at::Tensor>& tensors, int dstRank, int tag) {
  if (device_.wants(tensors)) return device_.get().send(tensors, dstRank, tag);
  at::Tensor tensor = singleTensor(tensors, "send");
  checkPeer(dstRank, rank_, size_, "send", "destination rank");
  return postPointToPoint(c10d::OpType::SEND, tensor, dstRank, tag);
}

c10::intrusive_ptr<c10d::Work> MonarchBackend::recv(std::vector<at::Tensor>& tensors, int srcRank, int tag) {
  if (device_.wants(tensors)) return device_.get().recv(tensors, srcRank, tag);
  at::Tensor tensor = singleTensor(tensors, "recv");
  checkPeer(srcRank, rank_, size_, "recv", "source rank");
  return postPointToPoint(c10d::OpType::RECV, tensor, srcRank, tag);
}

c10::intrusive_ptr<c10d::Work> MonarchBackend::recvAnysource(std::vector<at::Tensor>& tensors, int tag) {
  if (device_.wants(tensors)) return device_.get().recvAnysource(tensors, tag);
  at::Tensor tensor = singleTensor(tensors, "recv");
  return postPointToPoint(c10d::OpType::RECVANYSOURCE, tensor, -1, tag);
}

} // namespace monarch
