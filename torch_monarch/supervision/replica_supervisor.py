"""ReplicaSupervisor: one replica's supervision, whoever runs its workers.

The embedded orchestrator runs a replica's workers with torchrun's elastic
agent (:class:`~torch_monarch.supervision.agent.MonarchAgent`); the Monarch
orchestrator with a trainer mesh (:class:`~torch_monarch.monarch.replica_actor.ReplicaActor`).
Both hand everything that supervising a replica means to this class:

* the restart decision: restart in place while the :class:`RestartPolicy`
  allows (``supervise``; ``last_delay`` is the backoff to wait), else decline;
* status publishing (``agent.json``, :class:`~torch_monarch.supervision.rundir.AgentRecord`);
* the probe-and-kill step for hung workers (``kill_hung``);
* failure assembly: one worker's :class:`Failure` from what was observed
  (``worker_failure``), and the ``detected`` record of the replica's failure;
* the escalation record (``escalate``): the one place that marks a failure
  as escalated by this replica and writes ``escalation.json`` for the
  orchestrator.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import signal
import time
from typing import Any, Callable, Mapping, Optional

from torch_monarch.supervision.events import Event
from torch_monarch.supervision.failure import Failure, FailureKind
from torch_monarch.supervision.policy import RestartBudget, RestartPolicy
from torch_monarch.supervision.probes import Hang, HangConfig, HangProbe
from torch_monarch.supervision.rundir import AgentRecord, RunDir
from torch_monarch.supervision.states import SupervisorState
from torch_monarch.supervision.supervisor import Supervisor

__all__ = ["ReplicaSupervisor"]

logger: logging.Logger = logging.getLogger(__name__)


def kill_worker(pid: int) -> None:
    """SIGKILLs a worker this replica started (gone already is fine)."""
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


class ReplicaSupervisor(Supervisor):
    """Supervises one replica's workers; see the module docstring.

    Args:
        replica_id: the replica's id.
        policy: restarts in place allowed (max restarts in a window, backoff).
        run_dir: where status, events and the escalation record go (optional).
        parent: the in-process parent, if any (the orchestrator usually lives
            in another process and reads the escalation record instead).
        clock: the restart budget's clock.
        hang: the hang probe's settings.
        orchestrator: recorded in ``agent.json`` when not the embedded one.
    """

    def __init__(
        self,
        replica_id: str,
        policy: RestartPolicy,
        run_dir: Optional[RunDir] = None,
        parent: Optional[Supervisor] = None,
        clock: Callable[[], float] = time.monotonic,
        *,
        hang: Optional[HangConfig] = None,
        orchestrator: Optional[str] = None,
    ) -> None:
        super().__init__(f"replica {replica_id}", parent)
        self.replica_id = replica_id
        self.policy = policy
        self.budget = RestartBudget(policy, clock)
        self.run_dir = run_dir
        self.probe = HangProbe(hang or HangConfig(), run_dir, replica_id)
        self.orchestrator = orchestrator
        self.last_delay: float = 0.0
        self.failures: list[Failure] = []
        self._hangs: dict[int, Hang] = {}

    @property
    def restarts(self) -> int:
        return self.budget.total

    # -- restart decision -----------------------------------------------------

    def supervise(self, failure: Failure) -> bool:
        self.failures.append(failure)
        if self.probe.saw_training:
            self.budget.trained()
        delay = self.budget.request()
        if delay is None:
            logger.error(
                "%s: %d restarts within %.0fs already; escalating %s",
                self.name,
                self.policy.max_restarts,
                self.policy.window.total_seconds(),
                failure.describe(),
            )
            self.event(Event.ESCALATED, by=self.name, kind=failure.kind.value)
            return False
        self.last_delay = delay.total_seconds()
        logger.warning(
            "%s: restarting workers in place in %.2fs (restart %d): %s",
            self.name,
            self.last_delay,
            self.budget.total,
            failure.describe(),
        )
        self.event(
            Event.RESTART_SCHEDULED,
            delay_s=self.last_delay,
            restarts=self.budget.total,
            kind=failure.kind.value,
            who=failure.who,
        )
        return True

    # -- status ---------------------------------------------------------------

    def event(self, name: Event, **fields: Any) -> None:
        """Appends this replica's event to the job's timeline."""
        if self.run_dir is not None:
            self.run_dir.event(name, replica=self.replica_id, **fields)

    def publish(
        self,
        state: SupervisorState,
        workers: Mapping[int, int],
        *,
        failure: Optional[Failure] = None,
        delay_s: Optional[float] = None,
    ) -> None:
        """Writes ``agent.json``: ``state`` and the running attempt's ``workers`` (rank → pid)."""
        if self.run_dir is None:
            return
        self.run_dir.write_agent(
            AgentRecord(
                replica_id=self.replica_id,
                pid=os.getpid(),
                state=state,
                restarts=self.restarts,
                workers=dict(workers),
                t=time.time(),
                orchestrator=self.orchestrator,
                failure=failure.describe() if failure is not None else None,
                delay_s=delay_s,
            )
        )

    # -- hangs ----------------------------------------------------------------

    def start_attempt(self) -> None:
        """Forgets the previous attempt's probe state and hangs."""
        self.probe.reset()
        self._hangs.clear()

    def kill_hung(self, pids: Mapping[int, int], ranks: Optional[Mapping[int, int]] = None) -> None:
        """Probes the workers (local rank → pid) and SIGKILLs the hung ones.

        A killed worker then fails like any other; :meth:`worker_failure`
        reports it as the hang it was. ``ranks`` maps local rank to the rank
        in the replica (identity by default).
        """
        for hang in self.probe.check(pids, ranks):
            if hang.pid in self._hangs:
                continue
            self._hangs[hang.pid] = hang
            logger.error(
                "replica %s: worker local_rank %d (pid %d) is hung: %s; killing it",
                self.replica_id,
                hang.local_rank,
                hang.pid,
                hang.reason,
            )
            self.event(Event.HANG_DETECTED, pid=hang.pid, local_rank=hang.local_rank, reason=hang.reason)
            kill_worker(hang.pid)

    # -- failures -------------------------------------------------------------

    def worker_failure(
        self,
        *,
        rank: int,
        pid: Optional[int],
        exitcode: Optional[int],
        report: Optional[Mapping[str, Any]] = None,
        stderr_tail: str = "",
        detected_at: float,
        unexplained: str = "worker failed",
    ) -> Failure:
        """One worker's failure: the hang the probe found in it, else how it exited.

        ``exitcode`` is negative for a signal; None when the exit status is
        not known, and then ``unexplained`` is the message. ``report`` is the
        worker's error file, ``stderr_tail`` the end of its stderr.
        """
        unexplained_exit = Failure(
            who=f"replica {self.replica_id} / rank {rank} (pid {pid})",
            kind=FailureKind.EXIT_CODE,
            time=detected_at,
            message=unexplained,
            replica_id=self.replica_id,
            rank=rank,
            pid=pid,
            detected_at=detected_at,
        )
        hang = self._hangs.get(pid) if pid is not None else None
        if hang is not None:
            return dataclasses.replace(
                unexplained_exit, kind=FailureKind.HANG, message=hang.reason, exitcode=exitcode, signal=hang.signal
            )
        if exitcode is None:
            return unexplained_exit
        return Failure.from_exit(
            who=unexplained_exit.who, exitcode=exitcode, replica_id=self.replica_id, rank=rank, pid=pid,
            report=report, stderr_tail=stderr_tail, detected_at=detected_at,
        )

    def replica_failure(self, message: str, kind: FailureKind = FailureKind.EXIT_CODE) -> Failure:
        """A failure of the replica that names no worker (e.g. the worker group as a whole)."""
        now = time.time()
        return Failure(who=f"replica {self.replica_id}", kind=kind, time=now, message=message, replica_id=self.replica_id, detected_at=now)

    def refuse_preload(self, error: Exception) -> Failure:
        """Escalates a forkserver that refused its preload: no worker started, and none can as configured."""
        failure = dataclasses.replace(
            self.replica_failure(str(error), FailureKind.EXCEPTION),
            who=f"replica {self.replica_id} / forkserver",
            error_type=type(error).__name__,
        )
        return self.escalate(failure, {})

    def detected(self, failure: Failure, **fields: Any) -> None:
        """Logs and records (``detected`` event) the replica's failure, as assembled."""
        logger.error("replica %s: %s", self.replica_id, failure.describe())
        self.event(Event.DETECTED, **failure.event_fields(), **fields)

    def escalate(self, failure: Failure, workers: Mapping[int, int], state: SupervisorState = SupervisorState.ESCALATED) -> Failure:
        """Hands ``failure`` to the orchestrator: marks it as escalated by this replica and writes ``escalation.json``.

        The only place that marks a replica's escalation; the orchestrator
        reads the record through its scheduler as it is.
        """
        marked = failure.escalated(self.name)
        if self.run_dir is not None:
            self.run_dir.write_escalation(self.replica_id, marked)
        self.publish(state, workers, failure=failure)
        logger.error("replica %s: escalated: %s", self.replica_id, failure.describe())
        return marked
