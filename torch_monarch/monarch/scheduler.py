"""ReplicaActorScheduler: the :class:`Scheduler` whose allocations are ReplicaActors.

The OrchestrationManager drives the project's :class:`Orchestrator` (the
same replace-or-go-on policy as the embedded orchestrator) over this
scheduler: ``submit`` spawns a proc with a ReplicaActor for the replica,
``status`` reports what the actor's ``run`` returned or what it escalated,
``cancel`` stops it. The Orchestrator is synchronous; the actor calls it
makes are started here as tasks on the OrchestrationManager's event loop.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Optional

from torch_monarch.monarch.config import MonarchJobConfig
from torch_monarch.monarch.hosts import host_for
from torch_monarch.monarch.replica import ReplicaActor
from torch_monarch.supervision.failure import Failure, FailureKind
from torch_monarch.supervision.rundir import RunDir, read_json
from torch_monarch.supervision.scheduler.base import ReplicaSpec, ReplicaState, ReplicaStatus, Scheduler

__all__ = ["ReplicaActorScheduler"]

logger: logging.Logger = logging.getLogger(__name__)

_STOP_TIMEOUT_S = 60.0


@dataclass
class _Allocation:
    replica_id: str
    procs: Any
    actor: Any
    state: ReplicaState = ReplicaState.RUNNING
    failure: Optional[Failure] = None
    message: str = ""
    tasks: list["asyncio.Future[Any]"] = field(default_factory=list)


class ReplicaActorScheduler(Scheduler):
    """See the module docstring."""

    name = "monarch"

    def __init__(self, config: MonarchJobConfig, lighthouse: str, hosts: Optional[Any] = None) -> None:
        self.config = config
        self.lighthouse = lighthouse
        self.hosts = hosts  # an allocation's HostMesh (round robin per allocation), or None: this host
        self.run_dir = RunDir(config.run_dir)
        self._allocations: dict[str, _Allocation] = {}
        self._stopping: list["asyncio.Future[Any]"] = []

    def submit(self, spec: ReplicaSpec) -> str:
        handle = f"replica_{spec.replica_id}_{len(self._allocations)}"
        escalation = self.run_dir.escalation_path(spec.replica_id)
        escalation.unlink(missing_ok=True)  # a replacement starts with a clean record
        procs = host_for(self.hosts, len(self._allocations)).spawn_procs(per_host={"procs": 1}, name=handle)
        actor = procs.spawn(handle, ReplicaActor, self.config.replica(spec.replica_id, self.lighthouse))
        allocation = _Allocation(spec.replica_id, procs, actor)
        self._allocations[handle] = allocation
        allocation.tasks.append(asyncio.ensure_future(self._watch(handle, allocation)))
        return handle

    async def _watch(self, handle: str, allocation: _Allocation) -> None:
        try:
            state = await allocation.actor.run.call_one()
        except Exception as e:  # noqa: BLE001 - an escalation also arrives through __supervise__
            logger.info("replica %s: run ended: %s", allocation.replica_id, e)
            return
        if state == "succeeded" and allocation.state == ReplicaState.RUNNING:
            allocation.state = ReplicaState.SUCCEEDED
        elif state == "failed":  # escalated without Monarch's help (the ReplicaActor's exit probe)
            self.escalated(handle, "escalated by the ReplicaActor")

    def handle_of(self, mesh_name: str) -> Optional[str]:
        """The allocation a MeshFailure's mesh name belongs to."""
        base = mesh_name.rsplit("-", 1)[0]
        return base if base in self._allocations else None

    def escalated(self, handle: str, text: str) -> None:
        """Records that the allocation's ReplicaActor failed (escalated) with Monarch's ``text``."""
        allocation = self._allocations[handle]
        if allocation.state.terminal:
            return
        data = read_json(self.run_dir.escalation_path(allocation.replica_id))
        allocation.failure = Failure.from_json(data) if isinstance(data, dict) else None
        if allocation.failure is None:
            # The ReplicaActor itself died (not an escalation of its trainers' failure).
            allocation.failure = Failure(
                who=f"replica {allocation.replica_id}",
                kind=FailureKind.EXIT_CODE,
                time=time.time(),
                message=text.strip().splitlines()[-1].strip(),
                replica_id=allocation.replica_id,
            )
        allocation.state = ReplicaState.FAILED
        self._stopping.append(asyncio.ensure_future(allocation.procs.stop()))

    def status(self, handle: str) -> ReplicaStatus:
        allocation = self._allocations[handle]
        return ReplicaStatus(allocation.state, failure=allocation.failure, message=allocation.message)

    def cancel(self, handle: str) -> None:
        allocation = self._allocations[handle]
        allocation.state = ReplicaState.CANCELLED
        self._stopping.append(asyncio.ensure_future(self._stop(allocation)))

    async def _stop(self, allocation: _Allocation) -> None:
        try:
            await asyncio.wait_for(allocation.actor.shutdown.call_one(), timeout=_STOP_TIMEOUT_S)
        except Exception as e:  # noqa: BLE001 - the proc is stopped below either way
            logger.warning("replica %s: stop: %s", allocation.replica_id, e)
        await allocation.procs.stop()

    def close(self) -> None:
        """Stops the replicas that finished too (their procs stay until stopped)."""
        for allocation in self._allocations.values():
            if allocation.state == ReplicaState.SUCCEEDED:
                self._stopping.append(asyncio.ensure_future(self._stop(allocation)))

    async def drain(self) -> None:
        """Waits for every stop this scheduler started."""
        while self._stopping:
            pending, self._stopping = self._stopping, []
            await asyncio.gather(*pending, return_exceptions=True)

    def dryrun(self, spec: ReplicaSpec) -> str:
        trainer = self.config.trainer
        return f"ReplicaActor {spec.replica_id}: {trainer.nproc} x TrainerActor running {trainer.script} {' '.join(trainer.args)}"
