"""OrchestrationManager: the root actor of a Monarch-orchestrated job.

It spawns a :class:`LighthouseActor` (unless the job names a Lighthouse)
and one :class:`ReplicaActor` per replica, each in its own proc. A replica
whose ReplicaActor escalates (its trainers failed past the restart policy)
reaches this actor's ``__supervise__``; the project's
:class:`~torch_monarch.supervision.Orchestrator` then replaces it through
the scheduler (a new ReplicaActor) or goes on without it while
``min_replicas`` remain, else the job fails.

The client (:class:`~torch_monarch.monarch.client.MonarchJob`) polls
:meth:`poll` and finally calls :meth:`shutdown`.
"""

from __future__ import annotations

import logging
import os
from typing import Optional

from monarch.actor import Actor, MeshFailure, endpoint

from torch_monarch.job.config import JobConfig
from torch_monarch.monarch.messages import OrchestrationStatus
from torch_monarch.monarch.handles import ActorMesh, HostMesh, ProcMesh
from torch_monarch.monarch.hosts import host_for
from torch_monarch.monarch.lighthouse_actor import LighthouseActor
from torch_monarch.monarch.actor_scheduler import ReplicaActorScheduler, replica_specs
from torch_monarch.supervision.orchestrator import Orchestrator
from torch_monarch.supervision.policy import replacement_policy
from torch_monarch.supervision.events import Event
from torch_monarch.supervision.rundir import RunDir

__all__ = ["OrchestrationManager"]

logger: logging.Logger = logging.getLogger(__name__)


class OrchestrationManager(Actor):
    """See the module docstring."""

    def __init__(self, config: JobConfig, hosts: Optional[HostMesh] = None) -> None:
        self.config = config
        # The allocation's HostMesh (--scheduler slurm); None: this host.
        self.hosts = hosts
        self.run_dir = RunDir(config.run_dir)
        self.scheduler: Optional[ReplicaActorScheduler] = None
        self.orchestrator: Optional[Orchestrator] = None
        self._lighthouse_procs: Optional[ProcMesh] = None
        self._lighthouse: Optional[ActorMesh] = None
        self._lost: Optional[str] = None

    @endpoint
    async def start(self) -> str:
        """Starts the Lighthouse and the replicas; returns the Lighthouse's address."""
        address = self.config.lighthouse_address
        lighthouse_pid = None
        if not address:
            self._lighthouse_procs = host_for(self.hosts, 0).spawn_procs(per_host={"procs": 1}, name="lighthouse")
            self._lighthouse = self._lighthouse_procs.spawn("lighthouse", LighthouseActor, self.config.lighthouse)
            address = await self._lighthouse.address.call_one()
            lighthouse_pid = await self._lighthouse.pid.call_one()
        self.run_dir.event(Event.ORCHESTRATION_STARTED, pid=os.getpid(), lighthouse=address, lighthouse_pid=lighthouse_pid)
        self.scheduler = ReplicaActorScheduler(self.config, address, self.hosts)
        self.orchestrator = Orchestrator(
            self.scheduler,
            replica_specs(self.config),
            min_replicas=self.config.min_replicas,
            replace_policy=replacement_policy(self.config.replace_replicas),
            run_dir=self.run_dir,
        )
        self.orchestrator.start()
        return address

    @endpoint
    async def poll(self) -> OrchestrationStatus:
        """One supervision pass."""
        assert self.orchestrator is not None, "start() first"
        return OrchestrationStatus(
            running=self.orchestrator.poll() and self._lost is None,
            succeeded=self.orchestrator.succeeded and self._lost is None,
            fatal=self.orchestrator.fatal,
            lost=self._lost,
        )

    @endpoint
    async def shutdown(self) -> None:
        """Stops every replica and the Lighthouse, and waits until their procs are gone."""
        if self.orchestrator is not None and self.scheduler is not None:
            self.orchestrator.stop()
            await self.scheduler.drain()
        if self._lighthouse is not None:
            try:
                await self._lighthouse.shutdown.call_one()
            finally:
                assert self._lighthouse_procs is not None
                await self._lighthouse_procs.stop()
                self._lighthouse = None

    async def __supervise__(self, failure: MeshFailure) -> bool:
        handle = self.scheduler.handle_of(failure.mesh_name) if self.scheduler is not None else None
        if handle is not None:
            assert self.scheduler is not None
            logger.warning("orchestration: replica %s escalated", handle)
            self.scheduler.escalated(handle, str(failure))
            assert self.orchestrator is not None
            self.orchestrator.poll()  # replace it or go on without it, now
            return True
        if failure.mesh_name.rsplit("-", 1)[0] == "lighthouse":
            # Without the quorum service no replica can make progress: the job ends.
            logger.error("orchestration: the Lighthouse failed: %s", failure)
            self._lost = f"the Lighthouse failed: {failure}"
        return True
