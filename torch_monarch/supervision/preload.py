"""The embedded orchestrator's forkserver: started once per replica agent, before its workers.

With ``start_method="forkserver"`` torch elastic forks every worker (and
every restarted worker) from ``multiprocessing``'s forkserver. The agent
starts that server here, before the first workers, by forking one no-op
process from it: that returns once the server has imported its preload
(``_forkserver_preload``, CUDA-clean), or fails if the server refused it,
and then :func:`start_forkserver` raises :class:`PreloadError` with the
server's reason (a module that initialised CUDA, or failed to import).
"""

from __future__ import annotations

import json
import multiprocessing
import multiprocessing.forkserver
import os
import signal
import tempfile
import threading
from typing import Optional, Sequence

__all__ = [
    "FORKSERVER_START_TIMEOUT_S",
    "PRELOAD_ENV",
    "PreloadError",
    "VERDICT_ENV",
    "WORKER_ARGS_ENV",
    "base_preload",
    "start_forkserver",
    "worker_args",
    "worker_args_env",
]

#: the modules the server imports (comma-separated), read by ``_forkserver_preload``
PRELOAD_ENV = "MONARCH_FORKSERVER_PRELOAD"
#: where the server writes why it refused its preload
VERDICT_ENV = "MONARCH_FORKSERVER_VERDICT"
#: the workers' script arguments (a JSON list), for preload modules whose start-up work depends on them
WORKER_ARGS_ENV = "MONARCH_WORKER_ARGS"
_PRELOAD_MODULE = "torch_monarch.supervision._forkserver_preload"
#: how long a forkserver (either orchestrator's) may take to import its preload before it counts as hung
FORKSERVER_START_TIMEOUT_S = 300.0


class PreloadError(RuntimeError):
    """The workers' forkserver refused its preload; no worker was started."""


def base_preload(extra: Sequence[str]) -> list[str]:
    """What every forkserver imports: torch, torch_monarch, TorchFT (when installed), then ``extra``."""
    import importlib.util

    modules = ["torch", "torch_monarch"]
    if importlib.util.find_spec("torchft") is not None:
        modules.append("torchft")
    return modules + [m for m in extra if m not in modules]


def worker_args_env(args: Sequence[str]) -> dict[str, str]:
    """The environment that tells a forkserver (either orchestrator's) the arguments its workers will get."""
    return {WORKER_ARGS_ENV: json.dumps(list(args))}


def worker_args() -> Optional[list[str]]:
    """In a forkserver's preload module: the script arguments of the workers it will fork (None: not told).

    A preload can then do once what every worker would do at start-up from
    those arguments (say load a tokenizer), and the workers inherit it.
    """
    raw = os.environ.get(WORKER_ARGS_ENV)
    if raw is None:
        return None
    try:
        args = json.loads(raw)
    except ValueError:
        args = None
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise ValueError(f"{WORKER_ARGS_ENV} is not a JSON list of strings: {raw[:200]!r}")
    return args


def _server_pid() -> Optional[int]:
    return getattr(multiprocessing.forkserver._forkserver, "_forkserver_pid", None)


def _fork_probe(timeout: float) -> None:
    """Forks one no-op process from the server; returns once the server imported its preload and forked it.

    Raises OSError/EOFError when the server ended (it refused its preload),
    and PreloadError when it has not answered within ``timeout`` (a module
    whose import hangs): the server is then killed.
    """
    probe = multiprocessing.get_context("forkserver").Process(target=int, name="forkserver-probe")
    errors: list[BaseException] = []
    done = threading.Event()

    def fork() -> None:
        try:
            probe.start()
            probe.join()
        except BaseException as e:  # noqa: BLE001 - re-raised in the caller's thread
            errors.append(e)
        finally:
            done.set()

    threading.Thread(target=fork, name="forkserver-probe", daemon=True).start()
    if not done.wait(timeout):
        pid = _server_pid()
        if pid is not None:
            os.kill(pid, signal.SIGKILL)  # the probe's thread then sees the connection end
        raise PreloadError(f"the workers' forkserver did not finish importing its preload within {timeout:.0f} s")
    if errors:
        raise errors[0]


def start_forkserver(modules: Sequence[str], timeout: float = FORKSERVER_START_TIMEOUT_S) -> Optional[int]:
    """Starts this process's forkserver with ``modules`` imported; returns its pid.

    Raises :class:`PreloadError` when the server refused the preload, or
    had not imported it after ``timeout`` seconds.
    """
    fd, verdict = tempfile.mkstemp(prefix="monarch-forkserver-verdict-")
    os.close(fd)
    os.environ[PRELOAD_ENV] = ",".join(modules)
    os.environ[VERDICT_ENV] = verdict
    multiprocessing.set_forkserver_preload([_PRELOAD_MODULE])
    try:
        try:
            _fork_probe(timeout)
        except (OSError, EOFError) as e:
            with open(verdict) as f:
                reason = f.read() or f"{type(e).__name__}: {e}"
            raise PreloadError(f"the workers' forkserver refused its preload ({', '.join(modules)}): {reason}") from None
    finally:
        os.unlink(verdict)
    return _server_pid()
