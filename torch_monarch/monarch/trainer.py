"""TrainerActor: one trainer process of a replica, running the training script.

The contract is ``monarch-run``'s (torchrun's plus torch_monarch's): the
script finds ``RANK``/``WORLD_SIZE``/``MASTER_ADDR``/``MASTER_PORT`` (set by
``monarch.spmd.setup_torch_elastic_env``) for the "monarch" backend inside
the replica, ``TORCHFT_LIGHTHOUSE`` and ``REPLICA_GROUP_ID`` for TorchFT's
Manager with ``ProcessGroupMonarch`` across replicas, ``MONARCH_RUN_DIR``
for progress and drills, and ``TORCHELASTIC_ERROR_FILE`` for
``report_training_error``.

A trainer that fails ends its process: an exception escaping the script is
reported with its traceback first, then the process exits with code 1, so
every failure reaches the ReplicaActor's ``__supervise__`` the same way
(Monarch sees the process die: signal or exit code).

A ReplicaActor keeps a standby mesh of trainers ready for the next
restart. Their procs fork from the replica's forkserver with torch and the
``preload`` modules loaded; :meth:`TrainerActor.preload` imports whatever
is still missing (everything, if the procs started without it).
"""

from __future__ import annotations

import faulthandler
import importlib
import logging
import os
import runpy
import sys
from pathlib import Path

from monarch.actor import Actor, endpoint

from torch_monarch.job.config import TrainerSpec

__all__ = ["TrainerActor"]

logger: logging.Logger = logging.getLogger(__name__)


def _redirect_output(log_dir: Path) -> None:
    """Sends this process's stdout/stderr (and faulthandler's dumps) to ``log_dir``."""
    log_dir.mkdir(parents=True, exist_ok=True)
    for fd, name in ((1, "stdout.log"), (2, "stderr.log")):
        target = os.open(log_dir / name, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(target, fd)
        os.close(target)
    faulthandler.enable(all_threads=True)


def _die(exc: BaseException) -> None:
    """Reports ``exc`` (unless the script's ``@supervised`` did) and ends the process."""
    from torch_monarch.supervision import worker

    if not worker.error_reported():
        worker.report_training_error(exc)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(1)


class TrainerActor(Actor):
    """Runs the training script in this process; see the module docstring."""

    @endpoint
    def preload(self, modules: list[str]) -> int:
        """Imports ``modules`` ahead of time; returns this process's pid."""
        for name in modules:
            importlib.import_module(name)
        return os.getpid()

    @endpoint
    def run(self, spec: TrainerSpec, env: dict[str, str], log_dir: str) -> bool:
        """Runs the script to its end; True when it finished (a failure ends the process)."""
        logs = Path(log_dir) / os.environ.get("RANK", "0")
        os.environ.update(env)
        os.environ["TORCHELASTIC_ERROR_FILE"] = str(logs / "error.json")
        _redirect_output(logs)
        sys.argv = [spec.script, *spec.args]
        try:
            if spec.module:
                runpy.run_module(spec.script, run_name="__main__", alter_sys=True)
            else:
                runpy.run_path(spec.script, run_name="__main__")
        except SystemExit as e:
            if e.code not in (None, 0):
                _die(e)
        except BaseException as e:  # noqa: BLE001 - report everything, then end the process
            _die(e)
        sys.stdout.flush()
        sys.stderr.flush()
        return True
