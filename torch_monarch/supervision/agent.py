"""torchrun's elastic agent, with the replica supervisor deciding restarts.

``MonarchAgent`` is torch.distributed.elastic's ``LocalElasticAgent`` (the
agent torchrun runs on every node: rendezvous, worker processes, log
redirection, error files, exit status) with three additions, all through
the agent's own extension points:

* ``_monitor_workers`` also runs the hang probes and kills a hung worker
  (SIGKILL, by pid: only this agent's own children), so a hang becomes a
  worker failure the agent's loop already knows how to handle;
* every failure observed is turned into a :class:`Failure` (exit status or
  signal, the worker's error report with its traceback, the faulthandler
  dump from its stderr, the probe that fired);
* ``_restart_workers`` asks the :class:`ReplicaSupervisor` first: restart in
  place after the policy's backoff, or raise :class:`EscalatedFailure` so the
  agent stops its workers and the failure goes up to the orchestrator.
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
import math
import signal
import time
from datetime import timedelta
from typing import Any, Optional

from torch.distributed.elastic.agent.server.api import RunResult, WorkerGroup, WorkerSpec, WorkerState
from torch.distributed.elastic.agent.server.local_elastic_agent import LocalElasticAgent
from torch.distributed.elastic.multiprocessing import LogsSpecs
from torch.distributed.elastic.multiprocessing.api import PContext

from torch_monarch.supervision.events import Event
from torch_monarch.supervision.failure import Failure, FailureKind, read_tail, root_cause
from torch_monarch.supervision.probes import process_state
from torch_monarch.supervision.replica_supervisor import ReplicaSupervisor, kill_worker
from torch_monarch.supervision.rundir import read_json
from torch_monarch.supervision.states import SupervisorState

# torch 2.11's LocalElasticAgent._shutdown has no timeout parameter.
_SHUTDOWN_TAKES_TIMEOUT = "timeout" in inspect.signature(LocalElasticAgent._shutdown).parameters

__all__ = ["EscalatedFailure", "MonarchAgent"]

logger: logging.Logger = logging.getLogger(__name__)


class EscalatedFailure(Exception):
    """The replica supervisor declined a failure; it goes to the parent."""

    def __init__(self, failure: Failure) -> None:
        super().__init__(failure.describe())
        self.failure = failure


class MonarchAgent(LocalElasticAgent):
    """A ``LocalElasticAgent`` supervised by a :class:`ReplicaSupervisor`.

    Args:
        spec, logs_specs, start_method, **kwargs: as for ``LocalElasticAgent``.
            ``spec.max_restarts`` should be large: the supervisor's restart
            policy is what limits restarts.
        supervisor: decides every restart, publishes the replica's status,
            probes for hangs and assembles failures.
        stop_timeout: how long stopping workers may wait for SIGTERM to
            take effect before SIGKILL (torch's default is 30 s).
    """

    def __init__(
        self,
        spec: WorkerSpec,
        logs_specs: LogsSpecs,
        start_method: str,
        *,
        supervisor: ReplicaSupervisor,
        stop_timeout: timedelta = timedelta(seconds=5),
        **kwargs: Any,
    ) -> None:
        super().__init__(spec, logs_specs, start_method=start_method, **kwargs)
        self._supervisor = supervisor
        self._replica_id = supervisor.replica_id
        # torch's PContext takes whole seconds.
        self._stop_timeout_s = max(1, math.ceil(stop_timeout.total_seconds()))
        self._last_failure: Optional[Failure] = None
        self.failures: list[Failure] = []

    # -- status -----------------------------------------------------------

    def worker_pids(self) -> dict[int, int]:
        """Local rank → pid of the running workers (none before they start)."""
        if self._pcontext is None:
            return {}
        try:
            return dict(self._pcontext.pids())
        except Exception:  # noqa: BLE001 - a half-started context has no pids
            return {}

    def publish(self, state: SupervisorState, **fields: Any) -> None:
        self._supervisor.publish(state, self.worker_pids(), **fields)

    # -- workers ----------------------------------------------------------

    def _start_workers(self, worker_group: WorkerGroup) -> dict[int, Any]:
        self._supervisor.start_attempt()
        pids: dict[int, Any] = super()._start_workers(worker_group)
        assert self._pcontext is not None
        _bound_close(self._pcontext, self._stop_timeout_s)
        self._supervisor.event(Event.WORKERS_STARTED, attempt=self._supervisor.restarts, pids=list(pids.values()))
        self.publish(SupervisorState.RUNNING)
        return pids

    def _stop_workers(self, worker_group: WorkerGroup) -> None:
        if _SHUTDOWN_TAKES_TIMEOUT:
            self._shutdown(timeout=self._stop_timeout_s)
        else:
            self._shutdown()  # torch < 2.12: bounded by _bound_close alone

    def _monitor_workers(self, worker_group: WorkerGroup) -> RunResult:
        if self._pcontext is not None and worker_group.state == WorkerState.HEALTHY:
            ranks = {w.local_rank: w.global_rank for w in worker_group.workers}
            self._supervisor.kill_hung(self._pcontext.pids(), ranks)
        result: RunResult = super()._monitor_workers(worker_group)
        if result.state in (WorkerState.FAILED, WorkerState.UNHEALTHY):
            failure = self._failure_of(result, worker_group)
            self._last_failure = failure
            self.failures.append(failure)
            self._supervisor.detected(failure)
        return result

    def _restart_workers(self, worker_group: WorkerGroup) -> None:
        failure = self._last_failure or self._supervisor.replica_failure(f"worker group {worker_group.state.name}")
        self._last_failure = None
        if not self._supervisor.supervise(failure):
            self.publish(SupervisorState.ESCALATING, failure=failure)
            raise EscalatedFailure(failure)
        delay = self._supervisor.last_delay
        self.publish(SupervisorState.RESTARTING, failure=failure, delay_s=delay)
        self._stop_workers(worker_group)
        if delay > 0:
            # The restart policy's backoff, not a synchronisation wait.
            time.sleep(delay)
        super()._restart_workers(worker_group)

    # -- failures ---------------------------------------------------------

    def _failure_of(self, result: RunResult, worker_group: WorkerGroup) -> Failure:
        now = time.time()
        by_global = {w.global_rank: w for w in worker_group.workers}
        failures: list[Failure] = []
        for global_rank, pf in result.failures.items():
            worker = by_global.get(global_rank)
            local_rank = worker.local_rank if worker is not None else pf.local_rank
            report = pf.error_file_data if isinstance(pf.error_file_data, dict) else {}
            failures.append(self._worker_failure(global_rank, local_rank, pf.pid, pf.exitcode, report, now))
        failures += self._reported_elsewhere(worker_group, {f.rank for f in failures}, now)
        if not failures:
            kind = FailureKind.HANG if result.state == WorkerState.UNHEALTHY else FailureKind.EXIT_CODE
            return self._supervisor.replica_failure(f"worker group {result.state.name}", kind)
        # SIGTERMs are this agent's own teardown of the surviving workers.
        organic = [f for f in failures if f.exitcode != -signal.SIGTERM] or failures
        root = root_cause(organic)
        teardown = tuple(f for f in failures if f not in organic)
        if teardown:
            root = dataclasses.replace(root, related=(*root.related, *teardown))
        return root

    def _reported_elsewhere(self, worker_group: WorkerGroup, seen: set[Optional[int]], now: float) -> list[Failure]:
        """Failures of workers the PContext did not list but that left an error report.

        torch's process contexts report the first worker that exited; when a
        crash made its peers' collectives fail, the peer may be the one listed.
        Every report counts for the root cause.
        """
        if self._pcontext is None:
            return []
        error_files = getattr(self._pcontext, "error_files", {}) or {}
        exitcodes = _exitcodes(self._pcontext)
        out = []
        for worker in worker_group.workers:
            if worker.global_rank in seen:
                continue
            path = error_files.get(worker.local_rank)
            report = read_json(path) if path else None
            exitcode = exitcodes.get(worker.local_rank)
            if not report and not exitcode:
                continue
            pid = worker.id if isinstance(worker.id, int) else None
            out.append(self._worker_failure(worker.global_rank, worker.local_rank, pid, exitcode, report, now))
        return out

    def _worker_failure(
        self,
        rank: int,
        local_rank: int,
        pid: Optional[int],
        exitcode: Optional[int],
        report: Optional[dict[str, Any]],
        now: float,
    ) -> Failure:
        return self._supervisor.worker_failure(
            rank=rank,
            pid=pid,
            # A worker that left a report but has no exit code yet failed all the same.
            exitcode=exitcode if exitcode else 1,
            report=report,
            stderr_tail=self._stderr_tail(local_rank),
            detected_at=now,
        )

    def _stderr_tail(self, local_rank: int) -> str:
        if self._pcontext is None:
            return ""
        path = self._pcontext.stderrs.get(local_rank) if isinstance(self._pcontext.stderrs, dict) else None
        return read_tail(path) if path else ""


def _exitcodes(pcontext: PContext) -> dict[int, Optional[int]]:
    """Exit code of each local rank's process (None while running), for both kinds of PContext."""
    out: dict[int, Optional[int]] = {}
    processes = getattr(getattr(pcontext, "_pc", None), "processes", None)  # MultiprocessContext
    if processes is not None:
        for local_rank, proc in enumerate(processes):
            out[local_rank] = proc.exitcode
        return out
    for local_rank, handler in (getattr(pcontext, "subprocess_handlers", None) or {}).items():  # SubprocessContext
        out[local_rank] = handler.proc.poll()
    return out


def _bound_close(pcontext: PContext, timeout_s: int) -> None:
    """Makes ``pcontext.close`` fast for hung workers.

    torch's PContext stops workers with SIGTERM and waits up to 30 s before
    SIGKILL; a stopped (SIGSTOP) process never acts on SIGTERM, so the
    agent would sit out the whole wait. This kills stopped workers at once
    and caps the wait for the others.
    """
    original = pcontext.close

    def close(death_sig: Optional[signal.Signals] = None, timeout: int = 30) -> None:
        try:
            pids = pcontext.pids()
        except Exception:  # noqa: BLE001
            pids = {}
        for pid in pids.values():
            if process_state(pid) in ("T", "t"):
                kill_worker(pid)
        original(death_sig, min(timeout, timeout_s))

    pcontext.close = close  # type: ignore[method-assign]
