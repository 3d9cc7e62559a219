"""The bootstrap command of a trainer proc: ``python -I _forkserver_client.py SOCKET``.

Monarch's host agent runs this program for every proc of a trainer mesh
and watches its pid. It asks the replica's forkserver (see
``forkserver.py``, which has imported torch once) to fork the real proc,
hands it this process's stdin/stdout/stderr and environment, and then
stands in for it: signals sent here go to the forked proc, and when it
ends this process ends the same way (same exit code, same signal), so the
host agent sees exactly what it would have seen of a proc it started itself.

Without a forkserver (the socket does not answer) it becomes Monarch's
usual bootstrap, which imports everything itself.

Standard library only, run with ``-I``: importing the torch_monarch
package would import torch, the very cost this avoids.
"""

from __future__ import annotations

import array
import json
import os
import select
import signal
import socket
import struct
import sys

_FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)
_MONARCH_BOOTSTRAP = "monarch._src.actor.bootstrap_main"


def _usual_bootstrap(reason: str) -> None:
    sys.stderr.write(f"torch_monarch forkserver unavailable ({reason}); starting the proc without it\n")
    sys.stderr.flush()
    os.execv(sys.executable, [sys.executable, "-m", _MONARCH_BOOTSTRAP])


def recv_exactly(conn: socket.socket, n: int) -> bytes:
    """``n`` bytes from ``conn``, or b"" if it closes first (the forkserver reads requests with it too)."""
    data = b""
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        if not chunk:
            return b""
        data += chunk
    return data


def _forward(child: int, sig: int) -> None:
    try:
        os.kill(child, sig)
    except ProcessLookupError:
        pass


def _end_like(status: int) -> None:
    """Ends this process as the forked proc ended (``status`` as from waitpid)."""
    sys.stdout.flush()
    sys.stderr.flush()
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig not in (signal.SIGKILL, signal.SIGSTOP):  # those two cannot be caught or blocked anyway
            signal.signal(sig, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, [sig])
        os.kill(os.getpid(), sig)
    os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1)


def main(path: str) -> None:
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(path)
    except OSError as e:
        conn.close()
        _usual_bootstrap(f"{path}: {e.strerror}")
    request = json.dumps({"env": dict(os.environ), "cwd": os.getcwd(), "client_pid": os.getpid()}).encode()
    fds = array.array("i", [0, 1, 2])
    conn.sendmsg([struct.pack("!I", len(request)), request], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds.tobytes())])
    reply = recv_exactly(conn, 4)
    if not reply:
        _usual_bootstrap("it closed the connection")
    child = struct.unpack("!i", reply)[0]
    for sig in _FORWARDED:
        signal.signal(sig, lambda s, _frame: _forward(child, s))
    # The forkserver sends the proc's wait status when it ends. Should the
    # forkserver die first, the proc's pidfd still says when it ends.
    try:
        pidfd = os.pidfd_open(child)
    except ProcessLookupError:  # already ended: the status is on its way
        pidfd = -1
    status = recv_exactly(conn, 4)
    if not status:
        if pidfd >= 0:
            select.select([pidfd], [], [])
        _end_like(1 << 8)
    _end_like(struct.unpack("!i", status)[0])


if __name__ == "__main__":
    main(sys.argv[1])
