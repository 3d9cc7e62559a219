# Types of the test-only extension torch_monarch._frame_probe
# (csrc/python/frame_probe_module.cc).

PROBE_CHANNEL: int
PROBE_SEQ: int

def probe_frames(stream: bytes, expected_bytes: int, timeout_seconds: float = 5.0) -> tuple[str, str, bytes]: ...
