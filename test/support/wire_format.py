"""Python encodings of the wire layouts in csrc/transport/wire.h, for tests
that speak to a monarch endpoint or a Connection directly: the 72-byte
Handshake and the 56-byte FrameHeader (host byte order, little-endian here),
whose checksum is FNV-1a 64 over the first 52 bytes folded to 32 bits."""

from __future__ import annotations

import struct
from dataclasses import dataclass, fields, replace

__all__ = [
    "FRAME_HEADER_BYTES",
    "HANDSHAKE_BYTES",
    "MAGIC",
    "PROTOCOL_VERSION",
    "Frame",
    "FrameKind",
    "OpCode",
    "fnv1a64",
    "handshake",
]

MAGIC = 0x4352_4E4D  # "MNRC"
PROTOCOL_VERSION = 1
HANDSHAKE_BYTES = 72
FRAME_HEADER_BYTES = 56
UINT8_DTYPE = 5  # DataType::kUInt8 in csrc/common/dtype.h
NO_REDUCE_OP = 0xFF

_HANDSHAKE = struct.Struct("<IHH16sQIiiIQQQ")
_HEADER_BODY = struct.Struct("<IBBBBQQIiQQB3s")  # everything before the checksum
assert _HANDSHAKE.size == HANDSHAKE_BYTES and _HEADER_BODY.size + 4 == FRAME_HEADER_BYTES


class FrameKind:
    DATA = 1
    ERROR_NOTICE = 2
    HEARTBEAT = 3
    GOODBYE = 4
    PROGRESS_QUERY = 5
    PROGRESS_REPLY = 6
    READ_DONE = 7
    PATH_ADDRESS = 8  # a payload path's own control frames; flags name the path
    PATH_READY = 9


class OpCode:
    BROADCAST = 1
    ALLREDUCE = 2
    POINT_TO_POINT = 10


FLAG_POINT_TO_POINT = 0x1
FLAG_REMOTE_READ = 0x2  # RemoteReadPath::kFrameFlag, a bit of kFramePathMask


def fnv1a64(data: bytes, seed: int = 1469598103934665603) -> int:
    value = seed
    for byte in data:
        value ^= byte
        value = (value * 1099511628211) & 0xFFFF_FFFF_FFFF_FFFF
    return value


def handshake(
    *,
    magic: int = MAGIC,
    version: int = PROTOCOL_VERSION,
    token: bytes = b"\0" * 16,
    group_hash: int = 0,
    epoch: int = 0,
    rank: int = 0,
    world_size: int = 2,
    pid: int = 1,
    endpoint_id: int = 0x5EED,
) -> bytes:
    """A Handshake as a peer would send it (host id / probe address zero)."""
    return _HANDSHAKE.pack(magic, version, 0, token, group_hash, epoch, rank, world_size, pid, endpoint_id, 0, 0)


@dataclass(frozen=True)
class Frame:
    """A FrameHeader; ``checksum=None`` computes the right one."""

    magic: int = MAGIC
    kind: int = FrameKind.DATA
    op: int = OpCode.ALLREDUCE
    dtype: int = UINT8_DTYPE
    flags: int = 0
    channel: int = 1
    seq: int = 1
    step: int = 0
    root: int = -1
    count: int = 0
    payload_bytes: int = 0
    reduce_op: int = 0
    padding: bytes = b"\0\0\0"
    checksum: "int | None" = None

    def body(self) -> bytes:
        return _HEADER_BODY.pack(
            self.magic, self.kind, self.op, self.dtype, self.flags, self.channel, self.seq, self.step,
            self.root, self.count, self.payload_bytes, self.reduce_op, self.padding,
        )

    def encode(self) -> bytes:
        body = self.body()
        if self.checksum is None:
            folded = fnv1a64(body)
            checksum = (folded ^ (folded >> 32)) & 0xFFFF_FFFF
        else:
            checksum = self.checksum
        return body + struct.pack("<I", checksum)

    def with_(self, **changes: object) -> "Frame":
        return replace(self, **changes)  # type: ignore[arg-type]

    @staticmethod
    def field_names() -> tuple[str, ...]:
        return tuple(f.name for f in fields(Frame))
