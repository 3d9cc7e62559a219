"""ProcForkserver: the trainer procs of a replica, forked from a process that has imported torch.

Importing torch takes a trainer about 2 s of CPU. A mesh spawned the usual
way pays that in every proc, at every restart, and on a busy host the
other replicas pay for it too, with their step rate. The ReplicaActor
therefore starts one forkserver, which imports the trainer's modules
once; every trainer mesh is then spawned with :meth:`bootstrap_command`,
whose program (``_forkserver_client.py``) has the forkserver fork the
real proc and stands in for it towards Monarch's host agent (signals in,
exit status out). A forked proc starts Monarch's usual proc bootstrap with
torch already loaded.

The server imports its modules with ``import_cuda_clean``: a module that
initialises CUDA is refused (the procs forked from it could not use the
GPU), and :meth:`start` raises ``PreloadError`` naming it.

The server is single-threaded and never imports Monarch (whose native
runtime starts threads): a fork copies only the calling thread, and a lock
held by another one would stay locked in the child forever.

Protocol, over a Unix socket: the client sends a 4-byte length and a JSON
request (environment, working directory, its pid) with its stdin, stdout
and stderr attached (SCM_RIGHTS); the server answers the forked pid
(4 bytes), then the proc's wait status (4 bytes) when it ends. A forked
proc kills itself when its client dies, so a client the host agent
SIGKILLs takes its proc with it.

The server also keeps every proc's wait status (:meth:`exit_text`): when
a crash makes its peers fail too, Monarch may report a peer first, and
the ReplicaActor still finds the crashed proc and its signal.
"""

from __future__ import annotations

import array
import asyncio
import json
import logging
import multiprocessing
import os
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence, Union

from torch_monarch.monarch._forkserver_client import recv_exactly
from torch_monarch.monarch.mesh_failure import exit_text
from torch_monarch.supervision.cuda_clean import import_cuda_clean
from torch_monarch.supervision.preload import FORKSERVER_START_TIMEOUT_S, PreloadError

__all__ = ["ProcForkserver"]

logger: logging.Logger = logging.getLogger(__name__)

_CLIENT = Path(__file__).with_name("_forkserver_client.py")
_REQUEST_TIMEOUT_S = 10.0
_MAX_REQUEST = 16 << 20
#: the server's first line when it refused its preload (instead of "ready")
_REFUSED = "refused: "


class ProcForkserver:
    """One replica's forkserver process; see the module docstring."""

    def __init__(self, preload: Sequence[str], env: Optional[Mapping[str, str]] = None) -> None:
        self.preload = tuple(preload)
        self.env = dict(env or {})
        self._dir = tempfile.mkdtemp(prefix="monarch-forkserver-")
        self.socket_path = os.path.join(self._dir, "socket")
        self._exits = os.path.join(self._dir, "exits")
        self._process: Optional[subprocess.Popen[bytes]] = None

    @property
    def pid(self) -> Optional[int]:
        return self._process.pid if self._process is not None else None

    async def start(self) -> None:
        """Starts the server and returns once it has imported ``preload`` and listens."""
        process = self._process = subprocess.Popen(
            [sys.executable, "-m", __name__, self.socket_path, self._exits, str(os.getpid()), *self.preload],
            stdout=subprocess.PIPE,
            # The job's environment over this proc's: preload modules read their settings from it at
            # import (the demo's warm-up skips its CPU step on --device cuda), as the workers will.
            env={**os.environ, **self.env},
        )
        assert process.stdout is not None
        try:
            line = await asyncio.wait_for(asyncio.get_running_loop().run_in_executor(None, process.stdout.readline), FORKSERVER_START_TIMEOUT_S)
        except asyncio.TimeoutError:
            line = b"timed out"
        if line.strip() != b"ready":
            self.stop()
            reason = line.decode(errors="replace").strip()
            if reason.startswith(_REFUSED):
                raise PreloadError(f"the trainer forkserver refused its preload ({', '.join(self.preload)}): {reason[len(_REFUSED):]}")
            raise RuntimeError(f"the trainer forkserver (preloading {', '.join(self.preload)}) did not start: {line!r}")
        logger.info("trainer forkserver pid %d ready at %s (preloaded %s)", process.pid, self.socket_path, self.preload)

    def bootstrap_command(self) -> Any:
        """Monarch's ``bootstrap_command`` for ``spawn_procs``: procs forked by this server."""
        from monarch.actor import default_bootstrap_cmd

        command = default_bootstrap_cmd()
        command.args = ["-I", str(_CLIENT), self.socket_path]
        return command

    def exit_text(self, pid: int) -> str:
        """How forked proc ``pid`` ended, in Monarch's words (``Killed(sig=9)``), or "" (running, or exited 0)."""
        try:
            with open(os.path.join(self._exits, str(pid))) as f:
                return exit_text(int(f.read()))
        except (OSError, ValueError):
            return ""

    def stop(self) -> None:
        """Ends the server (procs it forked live on, each with its client)."""
        process, self._process = self._process, None
        if process is not None:
            process.kill()
            process.wait()
            if process.stdout is not None:
                process.stdout.close()
        shutil.rmtree(self._dir, ignore_errors=True)


# -- the server process -------------------------------------------------


def _recv_request(conn: socket.socket) -> tuple[dict[str, Any], list[int]]:
    """The client's request and its stdin/stdout/stderr; ValueError (descriptors closed) for anything else."""
    conn.settimeout(_REQUEST_TIMEOUT_S)
    fds = array.array("i")
    header, ancillary, _flags, _addr = conn.recvmsg(4, socket.CMSG_SPACE(3 * fds.itemsize))
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[: len(data) - len(data) % fds.itemsize])
    try:
        if len(header) != 4 or len(fds) != 3:
            raise ValueError(f"malformed request ({len(header)} header bytes, {len(fds)} descriptors)")
        size = struct.unpack("!I", header)[0]
        if size > _MAX_REQUEST:
            raise ValueError(f"request of {size} bytes")
        body = recv_exactly(conn, size)
        if len(body) != size:
            raise ValueError("request cut short")
        request = json.loads(body)
        if not isinstance(request, dict) or not {"env", "cwd", "client_pid"} <= request.keys():
            raise ValueError("request without env, cwd and client_pid")
    except (OSError, ValueError):
        for fd in fds:
            os.close(fd)
        raise
    conn.settimeout(None)
    return request, list(fds)


def _end_with(pid: int) -> None:
    """Kills this process when process ``pid`` (its client) ends."""
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:
        os._exit(1)

    def watch() -> None:
        select.select([pidfd], [], [])
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, name="forkserver-client-watch", daemon=True).start()


def _become_proc(request: dict[str, Any], fds: list[int], sockets: list[socket.socket], pipe: tuple[int, int]) -> None:
    """In the forked child: takes the client's stdio and environment and runs Monarch's proc bootstrap."""
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    for s in sockets:  # detached first: a socket object must not close a reused descriptor later
        os.close(s.detach())
    for fd in pipe:
        os.close(fd)
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
    for fd in fds:
        if fd > 2:
            os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    _end_with(int(request["client_pid"]))
    # What Monarch's bootstrap module does when run as a script.
    multiprocessing.set_start_method("forkserver", force=True)
    from monarch._src.actor.bootstrap_main import invoke_main

    code: Any = 0
    try:
        invoke_main()
    except SystemExit as e:
        code = e.code
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code if isinstance(code, int) else 1)


def _reap(clients: dict[int, socket.socket], exits: str) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        record = os.path.join(exits, str(pid))
        with open(record + ".tmp", "w") as f:
            f.write(str(status))
        os.replace(record + ".tmp", record)
        conn = clients.pop(pid, None)
        if conn is not None:
            try:
                conn.sendall(struct.pack("!i", status))
            except OSError:
                pass  # the client is gone; its proc killed itself
            conn.close()


def serve(path: str, exits: str, parent_pid: int, preload: Sequence[str]) -> None:
    """The server loop: imports ``preload``, then forks a proc per request until killed."""
    from torch_monarch._lifetime import die_with_parent

    die_with_parent(parent_pid)
    os.makedirs(exits, exist_ok=True)
    try:
        import_cuda_clean(preload)
    except Exception as e:  # noqa: BLE001 - the client raises it: a proc forked from here could not use the GPU
        reason = f"{type(e).__name__}: {e}".replace("\n", " ")
        sys.stdout.write(f"{_REFUSED}{reason}\n")
        sys.stdout.flush()
        raise SystemExit(1) from e
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda _sig, _frame: None)
    clients: dict[int, socket.socket] = {}
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    watched: list[Union[socket.socket, int]] = [listener, wake_r]
    while True:
        ready, _, _ = select.select(watched, [], [])
        if wake_r in ready:
            try:
                while os.read(wake_r, 4096):
                    pass
            except BlockingIOError:
                pass
            _reap(clients, exits)
        if listener not in ready:
            continue
        conn, _ = listener.accept()
        try:
            request, fds = _recv_request(conn)
        except (OSError, ValueError) as e:
            logger.warning("trainer forkserver: refused a request: %s", e)
            conn.close()
            continue
        pid = os.fork()
        if pid == 0:
            try:
                _become_proc(request, fds, [listener, conn, *clients.values()], (wake_r, wake_w))
            finally:
                os._exit(1)
        for fd in fds:
            os.close(fd)
        try:
            conn.sendall(struct.pack("!i", pid))
            clients[pid] = conn
        except OSError:
            conn.close()  # the client is gone: so is its proc, by _end_with


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING)
    serve(sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:])
