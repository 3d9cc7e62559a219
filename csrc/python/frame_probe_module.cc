// torch_monarch._frame_probe, a test-only extension: feeds raw bytes to a real
// Connection, as if a peer had sent them, and reports what became of one
// posted receive. The frame decoder's fuzz tests drive it; the backend
// (torch_monarch._C) never carries it. Built from the transport sources it
// drives (see setup.py).

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <sys/socket.h>

#include <cstring>
#include <string>

#include "transport/channel_registry.h"
#include "transport/connection.h"
#include "transport/event_loop.h"
#include "transport/remote_read/remote_read_path.h"
#include "transport/tcp/inline_path.h"

namespace py = pybind11;

namespace monarch {

namespace {

constexpr uint64_t kProbeChannel = 1;
constexpr uint64_t kProbeSeq = 1;

// Returns (status kind, message, the receive buffer afterwards).
py::tuple probeFrames(const py::bytes& stream, size_t expectedBytes, double timeoutSeconds) {
  std::string data = stream;
  std::string buffer(expectedBytes, '\xAB');
  Status status;
  {
    py::gil_scoped_release release;
    int fds[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) {
      throw std::runtime_error(std::string("socketpair: ") + std::strerror(errno));
    }
    Socket writer(fds[1]);
    ChannelRegistry channels;
    EventLoop loop;
    // The paths of a link to a peer on this host whose memory cannot be read.
    PayloadPathList paths;
    paths.push_back(std::make_unique<RemoteReadPath>(0, /*sends=*/false));
    paths.push_back(std::make_unique<InlinePath>());
    auto connection = std::make_shared<Connection>(
        Socket(fds[0]), PeerIdentity{0, 0, "probe"}, &channels, &loop, std::move(paths));
    auto channel = channels.get(kProbeChannel);
    channel->bindPeers({nullptr, connection});

    auto transfer = std::make_shared<Transfer>();
    transfer->direction = Transfer::Direction::kRecv;
    transfer->seq = kProbeSeq;
    transfer->signature.op = OpCode::kAllreduce;
    transfer->signature.dtype = DataType::kUInt8;
    transfer->signature.count = expectedBytes;
    transfer->signature.reduceOp = 0;
    transfer->data = buffer.data();
    transfer->bytes = expectedBytes;
    transfer->peerRank = 1;
    transfer->signal = std::make_shared<CompletionSignal>();
    channel->postRecv(connection.get(), transfer);
    connection->start();

    std::string error;
    writeExact(writer.fd(), data.data(), data.size(), Clock::now() + std::chrono::seconds(5), &error);
    writer.close(); // EOF: the connection must fail anything still pending

    auto deadline = Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(timeoutSeconds * 1000));
    std::unique_lock<std::mutex> lock(transfer->signal->mutex);
    if (transfer->signal->cv.wait_until(lock, deadline, [&] { return transfer->done; })) {
      status = transfer->status;
    } else {
      status = Status::error(ErrorKind::kTimeout, {}, "receive still pending after EOF");
    }
    lock.unlock();
    loop.stop();
    connection->fail("probe finished");
  }
  return py::make_tuple(errorKindName(status.kind), status.message, py::bytes(buffer));
}

} // namespace
} // namespace monarch

PYBIND11_MODULE(_frame_probe, module) {
  module.doc() = "test-only: the frame decoder of a real Connection, fed raw bytes";
  module.def(
      "probe_frames", &monarch::probeFrames, py::arg("stream"), py::arg("expected_bytes"), py::arg("timeout_seconds") = 5.0,
      "Feeds `stream` to a Connection with one receive posted for "
      "(allreduce, uint8, count=expected_bytes, op=SUM) at sequence number 1, step 0, on channel 1; "
      "returns (status kind, message, receive buffer).");
  module.attr("PROBE_CHANNEL") = monarch::kProbeChannel;
  module.attr("PROBE_SEQ") = monarch::kProbeSeq;
}
