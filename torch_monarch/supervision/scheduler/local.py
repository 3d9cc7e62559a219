"""LocalScheduler: replica agents as processes on this host.

Each replica agent runs in its own session (process group), so cancelling a
replica signals exactly that agent's group: the agent stops its own
workers (SIGTERM → torch.distributed.elastic's handler → workers stopped),
and after a grace period the group is killed. Nothing outside the process
groups this scheduler started is ever signalled.
"""

from __future__ import annotations

import atexit
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from typing import IO, Optional

from torch_monarch.supervision.rundir import RunDir
from torch_monarch.supervision.scheduler.escalation import forget_escalation, read_escalation
from torch_monarch.supervision.scheduler.base import (
    ReplicaSpec,
    ReplicaState,
    ReplicaStatus,
    Scheduler,
    replica_command,
)

__all__ = ["LocalScheduler"]

logger: logging.Logger = logging.getLogger(__name__)


class _Job:
    def __init__(self, spec: ReplicaSpec, proc: "subprocess.Popen[bytes]", log: Optional[IO[bytes]]) -> None:
        self.spec = spec
        self.proc = proc
        self.log = log
        self.cancelled = False


class LocalScheduler(Scheduler):
    """Runs each replica agent as a local process in its own session.

    Args:
        run_dir: the job's run directory: agent logs go to
            ``replicas/<id>/agent.log``; an escalated failure is read back
            from ``replicas/<id>/escalation.json``.
        python: interpreter for the agents.
        grace_s: how long a cancelled agent may take to stop its workers
            before its process group is killed.
    """

    name = "local"

    def __init__(self, run_dir: Optional[RunDir] = None, python: str = sys.executable, grace_s: float = 10.0) -> None:
        self.run_dir = run_dir
        self.python = python
        self.grace_s = grace_s
        self._jobs: dict[str, _Job] = {}
        self._lock = threading.Lock()
        self._count = 0
        # Last resort: whatever happens to this process, its replica agents' groups go with it.
        atexit.register(self.kill_all)

    def dryrun(self, spec: ReplicaSpec) -> str:
        env = " ".join(f"{k}={v}" for k, v in sorted(spec.env.items()))
        return f"{env} {subprocess.list2cmdline(replica_command(spec, self.python))}".strip()

    def submit(self, spec: ReplicaSpec) -> str:
        if spec.nnodes != 1:
            raise ValueError("the local scheduler runs single-host replicas (nnodes=1)")
        log: Optional[IO[bytes]] = None
        if self.run_dir is not None:
            path = self.run_dir.replica_dir(spec.replica_id) / "agent.log"
            path.parent.mkdir(parents=True, exist_ok=True)
            log = open(path, "ab")  # noqa: SIM115 - closed with the job
        forget_escalation(self.run_dir, spec.replica_id)
        env = {**os.environ, **spec.env}
        proc = subprocess.Popen(
            replica_command(spec, self.python),
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log if log is not None else subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        with self._lock:
            self._count += 1
            handle = f"local://{spec.replica_id}/{self._count}"
            self._jobs[handle] = _Job(spec, proc, log)
        logger.info("replica %s: agent started (pid %d) as %s", spec.replica_id, proc.pid, handle)
        return handle

    def pid(self, handle: str) -> int:
        return self._jobs[handle].proc.pid

    def status(self, handle: str) -> ReplicaStatus:
        job = self._jobs.get(handle)
        if job is None:
            return ReplicaStatus(ReplicaState.UNKNOWN, message=f"unknown handle {handle}")
        code = job.proc.poll()
        if code is None:
            return ReplicaStatus(ReplicaState.RUNNING)
        self._close_log(job)
        if job.cancelled:
            return ReplicaStatus(ReplicaState.CANCELLED, exitcode=code)
        if code == 0:
            return ReplicaStatus(ReplicaState.SUCCEEDED, exitcode=0)
        failure = read_escalation(self.run_dir, job.spec.replica_id)
        return ReplicaStatus(ReplicaState.FAILED, exitcode=code, failure=failure, message=f"agent exited with {code}")

    def cancel(self, handle: str) -> None:
        job = self._jobs.get(handle)
        if job is None:
            return
        if job.proc.poll() is not None:
            if job.cancelled:
                _signal_group(job.proc.pid, signal.SIGKILL)  # stragglers of a group we stopped
            self._close_log(job)
            return
        job.cancelled = True
        pgid = job.proc.pid  # leader of its own session
        _signal_group(pgid, signal.SIGTERM)
        try:
            job.proc.wait(self.grace_s)
        except subprocess.TimeoutExpired:
            logger.warning("replica %s: agent did not stop in %.0fs; killing its process group", job.spec.replica_id, self.grace_s)
            _signal_group(pgid, signal.SIGKILL)
            job.proc.wait()
        # Anything the agent left in its own group (e.g. a forkserver).
        _signal_group(pgid, signal.SIGKILL)
        self._close_log(job)

    def close(self) -> None:
        with self._lock:
            handles = list(self._jobs)
        self.cancel_many(handles)

    def cancel_many(self, handles: list[str]) -> None:
        try:
            self._cancel_many(handles)
        except BaseException:
            self.kill_all()  # interrupted while stopping gracefully
            raise

    def _cancel_many(self, handles: list[str]) -> None:
        # Signal every agent first, so they stop their workers in parallel.
        for handle in handles:
            job = self._jobs[handle]
            if job.proc.poll() is None:
                job.cancelled = True
                _signal_group(job.proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + self.grace_s
        for handle in handles:
            job = self._jobs[handle]
            try:
                job.proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        for handle in handles:
            self.cancel(handle)

    def kill_all(self) -> None:
        """SIGKILLs the process group of every agent still running (no grace)."""
        for job in list(self._jobs.values()):
            if job.proc.poll() is None:
                job.cancelled = True
                _signal_group(job.proc.pid, signal.SIGKILL)
                job.proc.wait()
            self._close_log(job)

    @staticmethod
    def _close_log(job: _Job) -> None:
        if job.log is not None and not job.log.closed:
            job.log.close()


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass
