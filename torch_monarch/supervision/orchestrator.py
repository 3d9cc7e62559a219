"""Orchestrator: the root of the supervision tree.

It submits one replica agent per replica group through a :class:`Scheduler`
and watches them. A replica agent that ends in failure has escalated (its
workers kept failing past their restart policy, or the agent itself died):
the orchestrator then

1. replaces the replica with a new allocation from the scheduler, while
   its own replacement policy allows; else
2. carries on with fewer replicas, while at least ``min_replicas`` remain
   (the others keep training in a smaller quorum); else
3. declines: the job fails.

Quorum membership itself is not the orchestrator's business: TorchFT's
Lighthouse drops a dead replica and admits a restarted one.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

from torch_monarch.supervision.events import Event
from torch_monarch.supervision.failure import Failure, FailureKind
from torch_monarch.supervision.policy import RestartBudget, RestartPolicy, replacement_policy
from torch_monarch.supervision.rundir import RunDir
from torch_monarch.supervision.scheduler.base import ReplicaSpec, ReplicaState, Scheduler
from torch_monarch.supervision.supervisor import Supervisor

__all__ = ["Orchestrator", "ReplicaRecord"]

logger: logging.Logger = logging.getLogger(__name__)


@dataclass
class ReplicaRecord:
    """The orchestrator's view of one replica."""

    spec: ReplicaSpec
    handle: Optional[str] = None
    state: ReplicaState = ReplicaState.PENDING
    allocations: int = 0
    dropped: bool = False

    @property
    def active(self) -> bool:
        return not self.dropped and not self.state.terminal


class Orchestrator(Supervisor):
    """Root supervisor over replica agents; see the module docstring.

    Args:
        scheduler: runs the replica agents.
        replicas: one spec per replica group.
        min_replicas: fewest replicas the job may go on with.
        replace_policy: how many times (within a window) a failed replica
            is replaced by a new allocation; ``max_restarts=0`` never
            replaces.
        run_dir: where events go.
    """

    def __init__(
        self,
        scheduler: Scheduler,
        replicas: Sequence[ReplicaSpec],
        *,
        min_replicas: int = 1,
        replace_policy: RestartPolicy = replacement_policy(1),
        run_dir: Optional[RunDir] = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__("orchestrator", parent=None)
        if min_replicas < 1 or min_replicas > len(replicas):
            raise ValueError(f"min_replicas must be in [1, {len(replicas)}], got {min_replicas}")
        self.scheduler = scheduler
        self.replicas: dict[str, ReplicaRecord] = {spec.replica_id: ReplicaRecord(spec) for spec in replicas}
        self.min_replicas = min_replicas
        self.replace_policy = replace_policy
        self.run_dir = run_dir
        self._budgets = {rid: RestartBudget(replace_policy, clock) for rid in self.replicas}
        self.failures: list[Failure] = []
        self.fatal: Optional[Failure] = None

    # -- lifecycle ------------------------------------------------------------

    def _event(self, name: Event, **fields: Any) -> None:
        if self.run_dir is not None:
            self.run_dir.event(name, **fields)

    def _allocate(self, record: ReplicaRecord) -> None:
        record.handle = self.scheduler.submit(record.spec)
        record.state = ReplicaState.RUNNING
        record.allocations += 1
        self._event(
            Event.REPLICA_SUBMITTED,
            replica=record.spec.replica_id,
            allocation=record.allocations,
            scheduler=self.scheduler.name,
            handle=record.handle,
        )

    def start(self) -> None:
        """Submits every replica."""
        for record in self.replicas.values():
            self._allocate(record)

    def poll(self) -> bool:
        """One supervision pass; returns True while the job is still running."""
        for record in self.replicas.values():
            if not record.active or record.handle is None:
                continue
            status = self.scheduler.status(record.handle)
            record.state = status.state
            if status.state == ReplicaState.SUCCEEDED:
                self._event(Event.REPLICA_FINISHED, replica=record.spec.replica_id)
                continue
            if status.state in (ReplicaState.FAILED, ReplicaState.CANCELLED):
                failure = status.failure or Failure(
                    who=f"replica {record.spec.replica_id}",
                    kind=FailureKind.EXIT_CODE,
                    time=time.time(),
                    message=status.message or f"replica agent ended: {status.state.value}",
                    replica_id=record.spec.replica_id,
                    exitcode=status.exitcode,
                )
                # Escalated as the replica supervisor marked it (a replica agent
                # that died without a record escalated nothing: it stays unmarked).
                self.failures.append(failure)
                if not self.handle(failure):
                    self.fatal = failure
                    return False
        return self.running

    @property
    def running(self) -> bool:
        return self.fatal is None and any(r.active for r in self.replicas.values())

    @property
    def succeeded(self) -> bool:
        return self.fatal is None and all(r.dropped or r.state == ReplicaState.SUCCEEDED for r in self.replicas.values())

    def healthy_replicas(self) -> int:
        return sum(1 for r in self.replicas.values() if r.active)

    def run(self, poll_interval_s: float = 0.5) -> bool:
        """Polls until the job ends; True when it succeeded."""
        while self.poll():
            time.sleep(poll_interval_s)
        return self.succeeded

    def stop(self) -> None:
        """Cancels every replica still running."""
        handles = []
        for record in self.replicas.values():
            if record.handle is not None and not record.state.terminal:
                handles.append(record.handle)
                record.state = ReplicaState.CANCELLED
        self.scheduler.cancel_many(handles)
        self.scheduler.close()

    # -- supervision ----------------------------------------------------------

    def supervise(self, failure: Failure) -> bool:
        replica_id = failure.replica_id
        record = self.replicas.get(replica_id) if replica_id is not None else None
        if record is None:
            logger.error("orchestrator: failure of unknown origin: %s", failure.describe())
            return False
        budget = self._budgets[record.spec.replica_id]
        if budget.request() is not None:
            logger.warning("orchestrator: replacing replica %s: %s", replica_id, failure.describe())
            self._event(Event.REPLICA_REPLACING, replica=replica_id, kind=failure.kind.value, message=failure.message)
            self._allocate(record)
            return True
        others = sum(1 for r in self.replicas.values() if r.active and r is not record)
        if others >= self.min_replicas:
            record.dropped = True
            logger.warning(
                "orchestrator: going on without replica %s (%d replicas left, min %d): %s",
                replica_id,
                others,
                self.min_replicas,
                failure.describe(),
            )
            self._event(Event.REPLICA_DROPPED, replica=replica_id, remaining=others, kind=failure.kind.value)
            return True
        logger.error(
            "orchestrator: replica %s failed and only %d replicas would remain (min %d)", replica_id, others, self.min_replicas
        )
        self._event(Event.JOB_FAILED, replica=replica_id, kind=failure.kind.value, message=failure.message)
        return False
