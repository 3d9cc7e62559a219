"""Runs ``torch_monarch._frame_probe.probe_frames`` (a test-only extension)
in a child process, so that a decoder crash (abort, segfault) or hang is
reported as a test failure for that input instead of killing the test run.
The child is restarted after a crash or hang."""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
from dataclasses import dataclass
from typing import Any, Optional

__all__ = ["ProbeResult", "ProbeServer"]

# The probe itself gives up 5 s after EOF; past this the child is hung.
CALL_BOUND_S = 20.0
START_BOUND_S = 120.0


@dataclass(frozen=True)
class ProbeResult:
    """What the Connection made of a byte stream: the receive's status kind
    ("ok", "peer failure", ...) and message, and the receive buffer after."""

    kind: str
    message: str
    buffer: bytes


class ProbeCrashed(AssertionError):
    """The probe process died or hung on an input."""


def _serve(conn: multiprocessing.connection.Connection) -> None:
    from torch_monarch import _frame_probe

    conn.send(("ready", _frame_probe.PROBE_CHANNEL, _frame_probe.PROBE_SEQ))
    while True:
        try:
            stream, expected_bytes = conn.recv()
        except EOFError:
            return
        conn.send(_frame_probe.probe_frames(stream, expected_bytes, 5.0))


class ProbeServer:
    def __init__(self) -> None:
        self._process: Optional[multiprocessing.process.BaseProcess] = None
        self._conn: Optional[multiprocessing.connection.Connection] = None
        self.restarts = 0

    def _start(self) -> multiprocessing.connection.Connection:
        mp = multiprocessing.get_context("spawn")
        parent, child = mp.Pipe()
        process = mp.Process(target=_serve, args=(child,), name="frame-probe", daemon=True)
        process.start()
        child.close()
        if not parent.poll(START_BOUND_S):
            process.kill()
            process.join()
            raise RuntimeError("the probe process did not start")
        hello: Any = parent.recv()
        assert hello == ("ready", 1, 1), f"probe constants changed: {hello}"
        self._process, self._conn = process, parent
        return parent

    def probe(self, stream: bytes, expected_bytes: int) -> ProbeResult:
        conn = self._conn or self._start()
        try:
            conn.send((stream, expected_bytes))
            if conn.poll(CALL_BOUND_S):
                kind, message, buffer = conn.recv()
                return ProbeResult(kind, message, buffer)
            what = f"hung for {CALL_BOUND_S} s"
        except (EOFError, OSError):
            what = "crashed"
        exit_code = self._stop()
        raise ProbeCrashed(
            f"the frame decoder {what} (exit code {exit_code}) on a {len(stream)}-byte stream, "
            f"expecting {expected_bytes} bytes: {stream[:512].hex()}"
        )

    def _stop(self) -> Optional[int]:
        process, conn = self._process, self._conn
        self._process, self._conn = None, None
        self.restarts += 1
        if conn is not None:
            conn.close()
        if process is None:
            return None
        if process.exitcode is None:
            process.kill()
        process.join(10)
        return process.exitcode

    def close(self) -> None:
        if self._process is not None:
            self._stop()
