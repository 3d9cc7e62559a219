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

import multiprocessing
import multiprocessing.forkserver
import os
import tempfile
from typing import Optional, Sequence

__all__ = ["PRELOAD_ENV", "PreloadError", "VERDICT_ENV", "base_preload", "start_forkserver"]

#: the modules the server imports (comma-separated), read by ``_forkserver_preload``
PRELOAD_ENV = "MONARCH_FORKSERVER_PRELOAD"
#: where the server writes why it refused its preload
VERDICT_ENV = "MONARCH_FORKSERVER_VERDICT"
_PRELOAD_MODULE = "torch_monarch.supervision._forkserver_preload"


class PreloadError(RuntimeError):
    """The workers' forkserver refused its preload; no worker was started."""


def base_preload(extra: Sequence[str]) -> list[str]:
    """What every forkserver imports: torch, torch_monarch, TorchFT (when installed), then ``extra``."""
    import importlib.util

    modules = ["torch", "torch_monarch"]
    if importlib.util.find_spec("torchft") is not None:
        modules.append("torchft")
    return modules + [m for m in extra if m not in modules]


def start_forkserver(modules: Sequence[str]) -> Optional[int]:
    """Starts this process's forkserver with ``modules`` imported; returns its pid.

    Raises :class:`PreloadError` when the server refused the preload.
    """
    fd, verdict = tempfile.mkstemp(prefix="monarch-forkserver-verdict-")
    os.close(fd)
    os.environ[PRELOAD_ENV] = ",".join(modules)
    os.environ[VERDICT_ENV] = verdict
    multiprocessing.set_forkserver_preload([_PRELOAD_MODULE])
    try:
        probe = multiprocessing.get_context("forkserver").Process(target=int, name="forkserver-probe")
        try:
            probe.start()
            probe.join()
        except (OSError, EOFError) as e:
            with open(verdict) as f:
                reason = f.read() or f"{type(e).__name__}: {e}"
            raise PreloadError(f"the workers' forkserver refused its preload ({', '.join(modules)}): {reason}") from None
    finally:
        os.unlink(verdict)
    return getattr(multiprocessing.forkserver._forkserver, "_forkserver_pid", None)
