"""Fuzzes the frame decoder of a real Connection through ``probe_frames``,
which feeds a byte stream (then EOF) to a Connection with one receive posted
for (allreduce, uint8, count=N, op=SUM) at sequence number 1, step 0, on
channel 1. For every stream:

- the decoder never crashes or hangs (it runs in a child process, see
  probe_server.py; "timeout" means the receive was still pending after EOF);
- the receive succeeds only with exactly the payload of a frame that matches
  it (magic, checksum, kind, op, dtype, count, root, reduce op, channel,
  sequence number, step, length);
- otherwise it fails, and the buffer (0xAB fill) is untouched, except that a
  matching header's payload is received in place, so a stream cut inside it
  leaves that prefix of the payload (and still fails).

``MONARCH_SOAK=1`` runs many more examples, not derandomized.
"""

from __future__ import annotations

import os
from typing import Iterator

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from probe_server import ProbeResult, ProbeServer
from wire_format import FLAG_POINT_TO_POINT, FLAG_REMOTE_READ, FRAME_HEADER_BYTES, Frame, FrameKind

FILL = 0xAB
MAX_PAYLOAD = 2**40  # kMaxFramePayload
SOAK = os.environ.get("MONARCH_SOAK") == "1"
# A crashing input costs a restart of the probe process (seconds), so CI
# reports the first failing example as found rather than shrinking it.
fuzz_settings = settings(
    max_examples=2000 if SOAK else 150,
    deadline=None,
    derandomize=not SOAK,
    database=None,
    phases=tuple(Phase) if SOAK else (Phase.explicit, Phase.reuse, Phase.generate),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

KINDS = ("ok", "peer failure", "timeout", "aborted", "collective mismatch", "protocol error")


@pytest.fixture(scope="module")
def server() -> Iterator[ProbeServer]:
    probe = ProbeServer()
    yield probe
    probe.close()


def matching_frame(n: int, padding: bytes = b"\0\0\0") -> Frame:
    return Frame(count=n, payload_bytes=n, padding=padding)


def is_matching(frame: Frame, n: int) -> bool:
    """Would the posted receive accept this header (checksum included)?"""
    expected = matching_frame(n, frame.padding).with_(flags=frame.flags & ~(FLAG_POINT_TO_POINT | FLAG_REMOTE_READ))
    return frame.with_(checksum=None).encode() == frame.encode() and frame.with_(checksum=None) == expected


def assert_untouched(result: ProbeResult, n: int) -> None:
    assert result.buffer == bytes([FILL]) * n, f"{result}: the buffer was written although the receive failed"


def assert_failed(result: ProbeResult) -> None:
    assert result.kind in KINDS, result
    assert result.kind != "timeout", f"the receive was still pending after EOF: {result}"
    assert result.kind != "ok", f"the receive succeeded: {result}"


def assert_sound(result: ProbeResult, n: int, candidates: list[bytes]) -> None:
    """The generic invariant: success only with a matching frame's payload;
    failure leaves the buffer untouched or holding a prefix of one."""
    assert result.kind in KINDS and result.kind != "timeout", result
    if result.kind == "ok":
        assert result.buffer in candidates, f"success with a payload no matching frame carried: {result}"
        return
    untouched = bytes([FILL]) * n
    if result.buffer == untouched:
        return
    for payload in candidates:
        k = len(payload)
        while k > 0 and result.buffer[:k] != payload[:k]:
            k -= 1
        if result.buffer[:k] == payload[:k] and result.buffer[k:] == untouched[k:]:
            return
    raise AssertionError(f"a failed receive left bytes of no matching frame in the buffer: {result}")


# ---------------------------------------------------------------------------
# Strategies
# ---------------------------------------------------------------------------

sizes = st.integers(min_value=0, max_value=64)
paddings = st.binary(min_size=3, max_size=3)
u64 = st.integers(min_value=0, max_value=2**64 - 1)
payload_lengths = st.one_of(
    st.integers(min_value=0, max_value=80),
    st.sampled_from([2**31, 2**32, 2**36, MAX_PAYLOAD - 1, MAX_PAYLOAD, MAX_PAYLOAD + 1, 2**63, 2**64 - 1]),
    u64,
)


@st.composite
def benign_frames(draw: st.DrawFn) -> bytes:
    """Complete frames that must not disturb the posted receive."""
    choice = draw(st.sampled_from(["heartbeat", "read_done", "progress_reply", "other_seq", "other_channel_notice"]))
    if choice == "heartbeat":
        return Frame(kind=FrameKind.HEARTBEAT, op=0, dtype=0, channel=0, seq=0, reduce_op=0).encode()
    if choice == "read_done":
        return Frame(kind=FrameKind.READ_DONE, op=0, dtype=0, seq=draw(u64), reduce_op=0).encode()
    if choice == "progress_reply":
        return Frame(kind=FrameKind.PROGRESS_REPLY, op=0, dtype=0, seq=draw(u64), reduce_op=0).encode()
    if choice == "other_seq":
        body = draw(st.binary(max_size=32))
        seq = draw(st.integers(min_value=2, max_value=2**64 - 1))
        return Frame(seq=seq, count=len(body), payload_bytes=len(body)).encode() + body
    notice = draw(st.binary(max_size=40))
    channel = draw(st.integers(min_value=2, max_value=2**64 - 1))
    return Frame(kind=FrameKind.ERROR_NOTICE, op=0, dtype=0, channel=channel, seq=0, payload_bytes=len(notice), reduce_op=0).encode() + notice


def _biased(common: list[int], full: st.SearchStrategy[int]) -> st.SearchStrategy[int]:
    """Half the time a value the decoder accepts or treats specially."""
    return st.one_of(st.sampled_from(common), full)


@st.composite
def random_frames(draw: st.DrawFn) -> Frame:
    """Headers with every field drawn, biased to values the decoder accepts
    or treats specially, so that drawn frames get past the first checks."""
    byte = st.integers(min_value=0, max_value=255)
    return Frame(
        magic=draw(_biased([Frame.magic], st.integers(min_value=0, max_value=2**32 - 1))),
        kind=draw(_biased([1, 1, 1, 2, 3, 4, 5, 6, 7, 8], byte)),
        op=draw(_biased(list(range(1, 12)) + [0, 12], byte)),
        dtype=draw(_biased(list(range(0, 16)), byte)),
        flags=draw(_biased([0, 0, 1, 2, 3], byte)),
        channel=draw(_biased([1, 1, 0, 2], u64)),
        seq=draw(_biased([0, 1, 2], u64)),
        step=draw(_biased([0, 1], st.integers(min_value=0, max_value=2**32 - 1))),
        root=draw(_biased([-1], st.integers(min_value=-(2**31), max_value=2**31 - 1))),
        count=draw(_biased(list(range(0, 65)), u64)),
        payload_bytes=draw(payload_lengths),
        reduce_op=draw(_biased([0, 0xFF], byte)),
        padding=draw(paddings),
        checksum=draw(st.one_of(st.none(), st.none(), st.integers(min_value=0, max_value=2**32 - 1))),
    )


# ---------------------------------------------------------------------------
# Properties
# ---------------------------------------------------------------------------


@fuzz_settings
@given(n=sizes, data=st.data())
def test_a_valid_frame_delivers_exactly_its_payload(server: ProbeServer, n: int, data: st.DataObject) -> None:
    payload = data.draw(st.binary(min_size=n, max_size=n))
    before = b"".join(data.draw(st.lists(benign_frames(), max_size=4)))
    after = data.draw(st.binary(max_size=64))  # whatever follows cannot undo a completed receive
    frame = matching_frame(n, data.draw(paddings))
    result = server.probe(before + frame.encode() + payload + after, n)
    assert result.kind == "ok", result
    assert result.buffer == payload, result


@fuzz_settings
@given(n=sizes, data=st.data())
def test_a_truncated_frame_fails(server: ProbeServer, n: int, data: st.DataObject) -> None:
    payload = data.draw(st.binary(min_size=n, max_size=n))
    stream = matching_frame(n).encode() + payload
    cut = data.draw(st.integers(min_value=0, max_value=len(stream) - 1))
    result = server.probe(stream[:cut], n)
    assert_failed(result)
    received = max(0, cut - FRAME_HEADER_BYTES)
    assert result.buffer == payload[:received] + bytes([FILL]) * (n - received), result


@fuzz_settings
@given(n=sizes, data=st.data())
def test_a_mutated_header_fails_untouched(server: ProbeServer, n: int, data: st.DataObject) -> None:
    payload = data.draw(st.binary(min_size=n, max_size=n))
    original = matching_frame(n)
    name = data.draw(st.sampled_from([f for f in Frame.field_names() if f != "checksum"]))
    mutated = data.draw(random_frames()).with_(checksum=None)
    frame = original.with_(**{name: getattr(mutated, name)})
    if data.draw(st.booleans(), label="stale checksum"):
        frame = frame.with_(checksum=int.from_bytes(original.encode()[-4:], "little"))
    result = server.probe(frame.encode() + payload, n)
    if is_matching(frame, n):
        assert result.kind == "ok" and result.buffer == payload, (frame, result)
    else:
        assert_failed(result)
        assert_untouched(result, n)


@fuzz_settings
@given(n=sizes, data=st.data())
def test_random_headers_never_crash_or_lie(server: ProbeServer, n: int, data: st.DataObject) -> None:
    frames = data.draw(st.lists(random_frames(), min_size=1, max_size=3))
    if data.draw(st.booleans(), label="then a valid frame"):
        frames.append(matching_frame(n))
    stream = b""
    headers: list[tuple[int, Frame]] = []
    for frame in frames:
        headers.append((len(stream), frame))
        stream += frame.encode() + data.draw(st.binary(max_size=min(frame.payload_bytes, 96)))
    # What a matching header at each offset would deliver, whatever came before.
    candidates = [
        stream[offset + FRAME_HEADER_BYTES : offset + FRAME_HEADER_BYTES + n]
        for offset, frame in headers
        if is_matching(frame, n)
    ]
    result = server.probe(stream, n)
    assert_sound(result, n, candidates)


@st.composite
def frames_for_other_ops(draw: st.DrawFn) -> Frame:
    """Valid data frames for an op nobody has posted yet (another sequence
    number, step or group): buffered until a receive claims them."""
    key = draw(st.sampled_from(["seq", "step", "channel", "point_to_point"]))
    return Frame(
        op=draw(st.integers(min_value=1, max_value=11)),
        dtype=draw(st.integers(min_value=0, max_value=14)),
        flags=FLAG_POINT_TO_POINT if key == "point_to_point" else 0,
        channel=draw(st.integers(min_value=2, max_value=2**64 - 1)) if key == "channel" else 1,
        seq=draw(st.integers(min_value=2, max_value=2**64 - 1)) if key == "seq" else 1,
        step=draw(st.integers(min_value=1, max_value=2**32 - 1)) if key == "step" else 0,
        count=draw(u64),
        payload_bytes=draw(payload_lengths),
        reduce_op=draw(st.integers(min_value=0, max_value=255)),
    )


@fuzz_settings
@given(n=sizes, data=st.data())
def test_frames_for_other_ops_are_buffered_safely(server: ProbeServer, n: int, data: st.DataObject) -> None:
    early = data.draw(frames_for_other_ops())
    body = data.draw(st.binary(max_size=min(early.payload_bytes, 96)))
    payload = data.draw(st.binary(min_size=n, max_size=n))
    result = server.probe(early.encode() + body + matching_frame(n).encode() + payload, n)
    if early.payload_bytes == len(body):
        assert result.kind == "ok" and result.buffer == payload, (early, result)
    else:
        # The early frame swallows what follows as its payload, or is refused.
        assert_failed(result)
        assert_untouched(result, n)


@fuzz_settings
@given(n=sizes, stream=st.binary(max_size=400))
def test_random_bytes_never_crash_or_lie(server: ProbeServer, n: int, stream: bytes) -> None:
    result = server.probe(stream, n)
    assert_failed(result)
    assert_untouched(result, n)


@fuzz_settings
@given(n=sizes, data=st.data())
def test_an_error_notice_fails_the_receive(server: ProbeServer, n: int, data: st.DataObject) -> None:
    notice = data.draw(st.binary(max_size=100))
    header = Frame(kind=FrameKind.ERROR_NOTICE, op=0, dtype=0, seq=0, payload_bytes=len(notice), reduce_op=0)
    payload = data.draw(st.binary(min_size=n, max_size=n))
    result = server.probe(header.encode() + notice + matching_frame(n).encode() + payload, n)
    assert_failed(result)
    assert_untouched(result, n)


@pytest.mark.parametrize("announced", [2**34, 2**39, MAX_PAYLOAD])
def test_an_unexpected_frame_announcing_a_huge_payload(server: ProbeServer, announced: int) -> None:
    """A frame nobody has posted a receive for is buffered: a length the
    process cannot allocate must fail the link, not the process."""
    frame = Frame(seq=2, count=4, payload_bytes=announced)
    result = server.probe(frame.encode() + b"abcd", 4)
    assert_failed(result)
    assert_untouched(result, 4)
