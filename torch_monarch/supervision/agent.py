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
import os
import signal
import time
from datetime import timedelta
from typing import Any, Optional

from torch.distributed.elastic.agent.server.api import RunResult, WorkerGroup, WorkerSpec, WorkerState
from torch.distributed.elastic.agent.server.local_elastic_agent import LocalElasticAgent
from torch.distributed.elastic.multiprocessing import LogsSpecs
from torch.distributed.elastic.multiprocessing.api import PContext

from torch_monarch.supervision.failure import Failure, FailureKind, root_cause
from torch_monarch.supervision.probes import Hang, HangProbe, process_state
from torch_monarch.supervision.rundir import RunDir, read_json, write_json
from torch_monarch.supervision.supervisor import Supervisor

# torch 2.11's LocalElasticAgent._shutdown has no timeout parameter.
_SHUTDOWN_TAKES_TIMEOUT = "timeout" in inspect.signature(LocalElasticAgent._shutdown).parameters

__all__ = ["EscalatedFailure", "MonarchAgent"]

logger: logging.Logger = logging.getLogger(__name__)

_STDERR_TAIL_BYTES = 16384


class EscalatedFailure(Exception):
    """The replica supervisor declined a failure; it goes to the parent."""

    def __init__(self, failure: Failure) -> None:
        super().__init__(failure.describe())
        self.failure = failure


class MonarchAgent(LocalElasticAgent):
    """A ``LocalElasticAgent`` supervised by a replica :class:`Supervisor`.

    Args:
        spec, logs_specs, start_method, **kwargs: as for ``LocalElasticAgent``.
            ``spec.max_restarts`` should be large: the supervisor's restart
            policy is what limits restarts.
        supervisor: decides every restart (``supervise(failure)``); must
            expose ``last_delay`` (seconds to wait before restarting).
        probe: hang probe run on every monitor tick.
        replica_id: for failure records and the run directory.
        run_dir: where status and events go (optional).
        stop_timeout: how long stopping workers may wait for SIGTERM to
            take effect before SIGKILL (torch's default is 30 s).
    """

    def __init__(
        self,
        spec: WorkerSpec,
        logs_specs: LogsSpecs,
        start_method: str,
        *,
        supervisor: Supervisor,
        probe: HangProbe,
        replica_id: str,
        run_dir: Optional[RunDir] = None,
        stop_timeout: timedelta = timedelta(seconds=5),
        **kwargs: Any,
    ) -> None:
        super().__init__(spec, logs_specs, start_method=start_method, **kwargs)
        self._supervisor = supervisor
        self._probe = probe
        self._replica_id = replica_id
        self._run_dir = run_dir
        # torch's PContext takes whole seconds.
        self._stop_timeout_s = max(1, math.ceil(stop_timeout.total_seconds()))
        self._hangs: dict[int, Hang] = {}
        self._last_failure: Optional[Failure] = None
        self.failures: list[Failure] = []

    # -- status -----------------------------------------------------------

    def _publish(self, state: str, **fields: Any) -> None:
        if self._run_dir is None:
            return
        pids: dict[int, int] = {}
        if self._pcontext is not None:
            try:
                pids = self._pcontext.pids()
            except Exception:  # noqa: BLE001 - a half-started context has no pids
                pids = {}
        spec = self._worker_group.spec
        write_json(
            self._run_dir.agent_path(self._replica_id),
            {
                "replica_id": self._replica_id,
                "pid": os.getpid(),
                "state": state,
                "restarts": spec.max_restarts - self._remaining_restarts,
                "workers": {str(k): v for k, v in pids.items()},
                "t": time.time(),
                **fields,
            },
        )

    def _event(self, name: str, **fields: Any) -> None:
        if self._run_dir is not None:
            self._run_dir.event(name, replica=self._replica_id, **fields)

    # -- workers ----------------------------------------------------------

    def _start_workers(self, worker_group: WorkerGroup) -> dict[int, Any]:
        self._probe.reset()
        self._hangs.clear()
        pids = super()._start_workers(worker_group)
        assert self._pcontext is not None
        _bound_close(self._pcontext, self._stop_timeout_s)
        restarts = worker_group.spec.max_restarts - self._remaining_restarts
        self._event("workers_started", attempt=restarts, pids=list(pids.values()))
        self._publish("running")
        return pids

    def _stop_workers(self, worker_group: WorkerGroup) -> None:
        if _SHUTDOWN_TAKES_TIMEOUT:
            self._shutdown(timeout=self._stop_timeout_s)
        else:
            self._shutdown()  # torch < 2.12: bounded by _bound_close alone

    def _monitor_workers(self, worker_group: WorkerGroup) -> RunResult:
        if self._pcontext is not None and worker_group.state == WorkerState.HEALTHY:
            pids = self._pcontext.pids()
            ranks = {w.local_rank: w.global_rank for w in worker_group.workers}
            for hang in self._probe.check(pids, ranks):
                if hang.pid in self._hangs:
                    continue
                self._hangs[hang.pid] = hang
                logger.error(
                    "replica %s: worker local_rank %d (pid %d) is hung: %s; killing it",
                    self._replica_id,
                    hang.local_rank,
                    hang.pid,
                    hang.reason,
                )
                self._event("hang_detected", pid=hang.pid, local_rank=hang.local_rank, reason=hang.reason)
                try:
                    os.kill(hang.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        result = super()._monitor_workers(worker_group)
        if result.state in (WorkerState.FAILED, WorkerState.UNHEALTHY):
            failure = self._failure_of(result, worker_group)
            self._last_failure = failure
            self.failures.append(failure)
            logger.error("replica %s: %s", self._replica_id, failure.describe())
            self._event("detected", **failure.event_fields())
        return result

    def _restart_workers(self, worker_group: WorkerGroup) -> None:
        failure = self._last_failure or Failure(
            who=f"replica {self._replica_id}",
            kind=FailureKind.EXIT_CODE,
            time=time.time(),
            message=f"worker group {worker_group.state.name}",
            replica_id=self._replica_id,
        )
        self._last_failure = None
        if not self._supervisor.supervise(failure):
            self._publish("escalating", failure=failure.describe())
            raise EscalatedFailure(failure)
        delay = float(getattr(self._supervisor, "last_delay", 0.0))
        self._publish("restarting", failure=failure.describe(), delay_s=delay)
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
            return Failure(
                who=f"replica {self._replica_id}",
                kind=FailureKind.HANG if result.state == WorkerState.UNHEALTHY else FailureKind.EXIT_CODE,
                time=now,
                message=f"worker group {result.state.name}",
                replica_id=self._replica_id,
                detected_at=now,
            )
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
        """One worker's failure: the hang a probe found in it, else how it exited."""
        who = f"replica {self._replica_id} / rank {rank} (pid {pid})"
        hang = self._hangs.get(pid) if pid is not None else None
        if hang is not None:
            return Failure(
                who=who,
                kind=FailureKind.HANG,
                time=now,
                message=hang.reason,
                replica_id=self._replica_id,
                rank=rank,
                pid=pid,
                exitcode=exitcode,
                signal=hang.signal,
                detected_at=now,
            )
        return Failure.from_exit(
            who=who,
            # A worker that left a report but has no exit code yet failed all the same.
            exitcode=exitcode if exitcode else 1,
            replica_id=self._replica_id,
            rank=rank,
            pid=pid,
            report=report,
            stderr_tail=self._stderr_tail(local_rank),
            detected_at=now,
        )

    def _stderr_tail(self, local_rank: int) -> str:
        if self._pcontext is None:
            return ""
        path = self._pcontext.stderrs.get(local_rank) if isinstance(self._pcontext.stderrs, dict) else None
        if not path:
            return ""
        try:
            with open(path, "rb") as f:
                f.seek(0, os.SEEK_END)
                size = f.tell()
                f.seek(max(0, size - _STDERR_TAIL_BYTES))
                return f.read().decode(errors="replace")
        except OSError:
            return ""


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
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        original(death_sig, min(timeout, timeout_s))

    pcontext.close = close  # type: ignore[method-assign]
