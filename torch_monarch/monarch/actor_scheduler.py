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

from torch_monarch.job.config import JobConfig
from torch_monarch.monarch.messages import ReplicaConfig
from torch_monarch.monarch.handles import ActorMesh, HostMesh, ProcMesh
from torch_monarch.monarch.hosts import host_for
from torch_monarch.monarch.replica_actor import ReplicaActor
from torch_monarch.supervision.failure import Failure, FailureKind
from torch_monarch.supervision.rundir import RunDir
from torch_monarch.supervision.states import SupervisorState
from torch_monarch.supervision.scheduler.base import ReplicaSpec, ReplicaState, ReplicaStatus, Scheduler

__all__ = ["ReplicaActorScheduler", "replica_specs"]

logger: logging.Logger = logging.getLogger(__name__)

_STOP_TIMEOUT_S = 60.0


def replica_specs(config: JobConfig) -> list[ReplicaSpec]:
    """The job's replicas as this scheduler's specs (a ReplicaActor needs nothing but its id)."""
    return [ReplicaSpec(replica_id=rid, args=[], nproc_per_node=config.trainer.nproc) for rid in config.replica_ids]


@dataclass
class _Allocation:
    replica_id: str
    procs: ProcMesh
    actor: ActorMesh
    state: ReplicaState = ReplicaState.RUNNING
    failure: Optional[Failure] = None
    message: str = ""
    tasks: list["asyncio.Future[Any]"] = field(default_factory=list)


class ReplicaActorScheduler(Scheduler):
    """See the module docstring."""

    name = "monarch"

    def __init__(self, config: JobConfig, lighthouse: str, hosts: Optional[HostMesh] = None) -> None:
        self.config = config
        self.lighthouse = lighthouse
        self.hosts = hosts  # an allocation's HostMesh (round robin per allocation), or None: this host
        self.run_dir = RunDir(config.run_dir)
        self._allocations: dict[str, _Allocation] = {}
        self._stopping: list["asyncio.Future[Any]"] = []

    def submit(self, spec: ReplicaSpec) -> str:
        handle = f"replica_{spec.replica_id}_{len(self._allocations)}"
        self.run_dir.clear_escalation(spec.replica_id)
        procs = host_for(self.hosts, len(self._allocations)).spawn_procs(per_host={"procs": 1}, name=handle)
        actor = procs.spawn(handle, ReplicaActor, ReplicaConfig(spec.replica_id, self.lighthouse, self.config))
        allocation = _Allocation(spec.replica_id, procs, actor)
        self._allocations[handle] = allocation
        allocation.tasks.append(asyncio.ensure_future(self._watch(handle, allocation)))
        return handle

    async def _watch(self, handle: str, allocation: _Allocation) -> None:
        try:
            state = await allocation.actor.run.call_one()
        except Exception as e:  # noqa: BLE001 - the ReplicaActor's proc died, or its run raised
            # A dead proc also reaches __supervise__; a run that raised (its actor alive) reaches
            # nothing else, and a replica left RUNNING would hold the job until it times out.
            logger.warning("replica %s: run ended: %s", allocation.replica_id, e)
            self.escalated(handle, f"the ReplicaActor's run failed: {e}")
            return
        if state == SupervisorState.SUCCEEDED and allocation.state == ReplicaState.RUNNING:
            allocation.state = ReplicaState.SUCCEEDED
        elif state == SupervisorState.FAILED:  # escalated without Monarch's help (the ReplicaActor's exit probe)
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
        allocation.failure = self.run_dir.read_escalation(allocation.replica_id)
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
        script = ["-m", trainer.script] if trainer.module else [trainer.script]
        return f"ReplicaActor {spec.replica_id}: {trainer.nproc} x TrainerActor running {' '.join([*script, *trainer.args])}"
