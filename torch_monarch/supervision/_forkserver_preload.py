"""Imported by torch elastic's forkserver (the embedded orchestrator's workers fork from it).

``multiprocessing``'s forkserver imports its preload modules itself and
ignores an ``ImportError``; this module is its only preload and imports the
real list (``MONARCH_FORKSERVER_PRELOAD``) through :func:`import_cuda_clean`.
Any failure is written to ``MONARCH_FORKSERVER_VERDICT`` for the replica's
agent to raise, and ends the server: no worker forks from a server that
initialised CUDA or lacks a module.
"""

import os

from torch_monarch.supervision.cuda_clean import import_cuda_clean
from torch_monarch.supervision.preload import PRELOAD_ENV, VERDICT_ENV

try:
    import_cuda_clean([m for m in os.environ.get(PRELOAD_ENV, "").split(",") if m])
except BaseException as e:  # noqa: BLE001 - every failure is the agent's to report
    with open(os.environ[VERDICT_ENV], "w") as f:
        f.write(f"{type(e).__name__}: {e}")
    raise SystemExit(1) from e
