"""A Monarch ``MeshFailure`` as the supervision tree's :class:`Failure`.

Monarch names the crashed ranks and the reason (signal, exit code) only in
the failure's text, e.g. ``crashed_ranks=[0] ... failed: Killed(sig=9)`` or
``exited with non-zero code 1``. The rest of the evidence is what the
trainer left behind: its ``report_training_error`` file (exception and
traceback) and its stderr log (faulthandler's stacks after a segfault).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Optional

from torch_monarch.supervision.failure import Failure, read_tail
from torch_monarch.supervision.replica_supervisor import ReplicaSupervisor
from torch_monarch.supervision.rundir import read_json

__all__ = ["crashed_ranks", "exit_status", "exit_text", "trainer_failure"]

_RANKS = re.compile(r"crashed_ranks=\[([0-9, ]*)\]")
_SIGNAL = re.compile(r"Killed\(sig=(\d+)\)")
_EXIT = re.compile(r"exited with non-zero code (-?\d+)")


def crashed_ranks(text: str) -> list[int]:
    """The ranks a MeshFailure's text names."""
    match = _RANKS.search(text)
    if not match:
        return []
    return [int(r) for r in match.group(1).split(",") if r.strip()]


def exit_status(text: str) -> Optional[int]:
    """The crashed process's exit status, negative for a signal; None when not a process exit."""
    match = _SIGNAL.search(text)
    if match:
        return -int(match.group(1))
    match = _EXIT.search(text)
    if match:
        return int(match.group(1))
    return None


def exit_text(wait_status: int) -> str:
    """A process's ``waitpid`` status in Monarch's words (``Killed(sig=9)``), or "" for exit code 0."""
    if os.WIFSIGNALED(wait_status):
        return f"Killed(sig={os.WTERMSIG(wait_status)})"
    code = os.WEXITSTATUS(wait_status) if os.WIFEXITED(wait_status) else 1
    return f"exited with non-zero code {code}" if code else ""


def trainer_failure(
    supervisor: ReplicaSupervisor,
    text: str,
    *,
    rank: int,
    pid: Optional[int],
    log_dir: Path,
    detected_at: float,
) -> Failure:
    """The failure of trainer ``rank`` from Monarch's ``text`` and the files in ``log_dir``."""
    status = exit_status(text)
    report = read_json(log_dir / "error.json")
    if status is None and isinstance(report, dict):
        status = 1  # a trainer that reported its error exits with code 1 (TrainerActor, @supervised)
    return supervisor.worker_failure(
        rank=rank,
        pid=pid,
        exitcode=status,
        report=report if isinstance(report, dict) else None,
        stderr_tail=read_tail(log_dir / "stderr.log"),
        detected_at=detected_at,
        unexplained=text.strip().splitlines()[-1].strip() if text.strip() else "trainer failed",
    )
