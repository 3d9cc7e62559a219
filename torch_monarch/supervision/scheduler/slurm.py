"""A SLURM job's state and its cancellation, read from SLURM itself.

TorchX 0.7.0 submits SLURM jobs well, but its status (``sacct --parsable2``)
asserts on the state sacct gives a cancelled job (``CANCELLED by <uid>``),
and returns nothing for a job sacct has not recorded yet, which turns
``Runner.cancel`` of a just-submitted job into a no-op. So the
:class:`~torch_monarch.supervision.scheduler.torchx.TorchXScheduler` reads a
SLURM job's state here: the controller's live view (``squeue --states=all``,
which keeps ended jobs for ``MinJobAge``), else the accounting record
(``sacct``) once the controller has forgotten the job; and cancels with
``scancel``.
"""

from __future__ import annotations

import logging
import subprocess
import time
from dataclasses import dataclass
from typing import Optional

from torch_monarch.supervision.scheduler.base import ReplicaState

__all__ = ["SlurmJobState", "cancel_jobs", "job_state", "wait_ended"]

logger: logging.Logger = logging.getLogger(__name__)

_TIMEOUT_S = 30.0

# SLURM's job states (squeue's long names, sacct's first word) as replica states.
_STATES = {
    "PENDING": ReplicaState.PENDING,
    "CONFIGURING": ReplicaState.PENDING,
    "REQUEUED": ReplicaState.PENDING,
    "REQUEUE_HOLD": ReplicaState.PENDING,
    "RESIZING": ReplicaState.PENDING,
    "SUSPENDED": ReplicaState.PENDING,
    "RUNNING": ReplicaState.RUNNING,
    "COMPLETING": ReplicaState.RUNNING,
    "STAGE_OUT": ReplicaState.RUNNING,
    "SIGNALING": ReplicaState.RUNNING,
    "COMPLETED": ReplicaState.SUCCEEDED,
    "CANCELLED": ReplicaState.CANCELLED,
    "FAILED": ReplicaState.FAILED,
    "BOOT_FAIL": ReplicaState.FAILED,
    "DEADLINE": ReplicaState.FAILED,
    "NODE_FAIL": ReplicaState.FAILED,
    "OUT_OF_MEMORY": ReplicaState.FAILED,
    "PREEMPTED": ReplicaState.FAILED,
    "REVOKED": ReplicaState.FAILED,
    "SPECIAL_EXIT": ReplicaState.FAILED,
    "TIMEOUT": ReplicaState.FAILED,
}


@dataclass(frozen=True)
class SlurmJobState:
    """A SLURM job's state as SLURM names it, and its batch script's exit code (None while it runs)."""

    name: str
    exitcode: Optional[int]

    @property
    def replica_state(self) -> ReplicaState:
        return _STATES.get(self.name, ReplicaState.UNKNOWN)


def _run(command: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, capture_output=True, text=True, timeout=_TIMEOUT_S)


def _from_squeue(job_id: str) -> Optional[SlurmJobState]:
    out = _run(["squeue", "--noheader", "--states=all", f"--jobs={job_id}", "--Format=State:|,exit_code:"])
    if out.returncode != 0 or not out.stdout.strip():
        return None  # the controller no longer knows the job (or cannot be reached)
    name, _, status = out.stdout.strip().splitlines()[0].partition("|")
    # squeue's exit_code is the wait status: the exit code in the high byte, a signal in the low one.
    wait_status = int(status) if status.strip().isdigit() else 0
    exitcode = (wait_status >> 8) or (128 + (wait_status & 0x7F) if wait_status & 0x7F else 0)
    state = name.strip()
    return SlurmJobState(state, exitcode if _STATES.get(state, ReplicaState.UNKNOWN).terminal else None)


def _from_sacct(job_id: str) -> Optional[SlurmJobState]:
    out = _run(["sacct", "--allocations", "--parsable2", "--noheader", "--format=State,ExitCode", f"--jobs={job_id}"])
    if out.returncode != 0 or not out.stdout.strip():
        return None
    state, _, code = out.stdout.strip().splitlines()[0].partition("|")
    # "CANCELLED by 0" -> CANCELLED; ExitCode is "<code>:<signal>".
    name = state.split()[0]
    exit_part, _, signal_part = code.partition(":")
    exitcode = int(exit_part or 0) or (128 + int(signal_part) if signal_part.strip("0") else 0)
    return SlurmJobState(name, exitcode if _STATES.get(name, ReplicaState.UNKNOWN).terminal else None)


def job_state(job_id: str) -> Optional[SlurmJobState]:
    """The job's state: the controller's, else the accounting record's; None when neither knows it."""
    return _from_squeue(job_id) or _from_sacct(job_id)


def _ended(job_id: str) -> bool:
    state = job_state(job_id)
    return state is None or state.replica_state.terminal


def wait_ended(job_ids: list[str], timeout_s: float) -> list[str]:
    """Waits until SLURM has ended the jobs (their processes gone); returns those still not ended."""
    deadline = time.monotonic() + timeout_s
    live = [j for j in job_ids if not _ended(j)]
    while live and time.monotonic() < deadline:
        time.sleep(0.2)
        live = [j for j in live if not _ended(j)]
    return live


def cancel_jobs(job_ids: list[str], timeout_s: float) -> list[str]:
    """``scancel`` of every job still running, then :func:`wait_ended`.

    scancel only asks: each step of a job gets SIGTERM, then SIGKILL after
    the cluster's ``KillWait``; the job ends once its processes are gone.
    """
    live = [j for j in job_ids if not _ended(j)]
    for job_id in live:
        out = _run(["scancel", job_id])
        if out.returncode != 0:  # the others are still cancelled; the job is reported as not ended below
            logger.warning("scancel %s failed (%d): %s", job_id, out.returncode, out.stderr.strip())
    return wait_ended(live, timeout_s)
