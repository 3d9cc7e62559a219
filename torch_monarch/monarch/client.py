"""MonarchJob: the "monarch" job backend (``monarch-run --orchestrator monarch``, the demo's Monarch phases).

The :class:`~torch_monarch.job.backend.JobBackend` interface over a real
Monarch job: this process is Monarch's client; it spawns the
:class:`OrchestrationManager` in its own proc, polls it, and shuts it down
at the end. Everything else (status view, failure drills, the demo's
analysis) reads the run directory exactly as for the embedded backend.
"""

from __future__ import annotations

import logging
import sys
from typing import Callable, Optional

from torch_monarch.job.config import JobConfig
from torch_monarch.monarch._require import require_monarch
from torch_monarch.monarch.messages import OrchestrationStatus
from torch_monarch.monarch.handles import ActorMesh, HostAllocation, HostMesh, ProcMesh
from torch_monarch.supervision.events import Event
from torch_monarch.supervision.failure import Failure
from torch_monarch.supervision.rundir import RunDir

__all__ = ["MonarchJob"]

logger: logging.Logger = logging.getLogger(__name__)


def _slurm(config: JobConfig) -> HostAllocation:
    from torch_monarch.monarch.slurm import SlurmHosts

    return SlurmHosts(config.nnodes, config.scheduler.cfg, config.run_dir, sys.executable)


def _kubernetes(config: JobConfig) -> HostAllocation:
    from torch_monarch.monarch.kubernetes import KubernetesHosts

    return KubernetesHosts(config.nnodes, config.scheduler.cfg, config.scheduler.image)


#: --scheduler → the allocation whose hosts the job's procs are spawned on (else this host)
_ALLOCATIONS: dict[str, Callable[[JobConfig], HostAllocation]] = {"slurm": _slurm, "kubernetes": _kubernetes}


class MonarchJob:
    """A job under real Monarch actors; see the module docstring."""

    def __init__(self, config: JobConfig) -> None:
        require_monarch()
        if config.agent.no_python:
            raise SystemExit("monarch-run: --no-python is not supported with --orchestrator monarch (trainers run Python)")
        self.config = config
        self.run_dir = RunDir(config.run_dir)
        self.run_dir.root.mkdir(parents=True, exist_ok=True)
        self.lighthouse_address: str = config.lighthouse_address
        self._procs: Optional[ProcMesh] = None
        self._manager: Optional[ActorMesh] = None
        self._status = OrchestrationStatus(running=False)
        self._unhandled: Optional[str] = None
        self._allocation: Optional[HostAllocation] = None  # under --scheduler slurm or kubernetes

    def dryrun(self) -> str:
        from torch_monarch.monarch.actor_scheduler import ReplicaActorScheduler, replica_specs

        self._check_scheduler()
        lighthouse = self.lighthouse_address or f"a LighthouseActor (min_replicas {self.config.lighthouse.min_replicas})"
        placement = self.config.scheduler.name
        hosts = "this host" if placement == "local" else f"{self.config.nnodes} hosts allocated by {placement}"
        header = f"# OrchestrationManager on {hosts}: lighthouse {lighthouse}, run dir {self.config.run_dir}"
        scheduler = ReplicaActorScheduler(self.config, lighthouse)
        return "\n".join([header, *(scheduler.dryrun(spec) for spec in replica_specs(self.config))])

    def _on_unhandled(self, failure: object) -> None:
        # Monarch's default ends this process; the job reports it and stops instead.
        logger.error("monarch: unhandled failure: %s", failure)
        self._unhandled = str(failure)

    def start(self) -> None:
        import monarch.actor

        from torch_monarch.monarch.hosts import host_for
        from torch_monarch.monarch.orchestration import OrchestrationManager

        monarch.actor.unhandled_fault_hook = self._on_unhandled
        self.run_dir.event(Event.JOB_STARTED, replicas=self.config.replicas, orchestrator="monarch", scheduler="monarch")
        hosts = self._allocate()
        self._procs = host_for(hosts, 0).spawn_procs(per_host={"procs": 1}, name="orchestration")
        self._manager = self._procs.spawn("orchestration_manager", OrchestrationManager, self.config, hosts)
        self.lighthouse_address = self._manager.start.call_one().get()

    def _check_scheduler(self) -> None:
        if self.config.scheduler.name not in ("local", *_ALLOCATIONS):
            raise SystemExit(
                f"monarch-run: --orchestrator monarch runs on local, {', '.join(_ALLOCATIONS)}, not {self.config.scheduler.name!r}"
            )

    def _allocate(self) -> Optional[HostMesh]:
        """The hosts of ``--scheduler``: an allocation's HostMesh (SLURM, Kubernetes), or None for this host."""
        self._check_scheduler()
        scheduler = self.config.scheduler.name
        if scheduler == "local":
            return None
        self._allocation = _ALLOCATIONS[scheduler](self.config)
        hosts = self._allocation.start()
        self.run_dir.event(Event.ALLOCATION_STARTED, scheduler=scheduler, job_id=self._allocation.job_id)
        return hosts

    def poll(self) -> bool:
        assert self._manager is not None, "start() first"
        if self._unhandled is not None:
            return False
        status: OrchestrationStatus = self._manager.poll.call_one().get()
        self._status = status
        return status.running

    @property
    def succeeded(self) -> bool:
        return self._unhandled is None and self._status.succeeded

    @property
    def fatal(self) -> Optional[Failure]:
        return self._status.fatal

    @property
    def failure_message(self) -> Optional[str]:
        return self._unhandled or self._status.lost

    def stop(self) -> None:
        if self._manager is not None:
            try:
                self._manager.shutdown.call_one().get()
            finally:
                assert self._procs is not None
                self._procs.stop().get()
                self._manager = None
        if self._allocation is not None:
            self._allocation.stop()
            self._allocation = None
        self.run_dir.event(Event.JOB_STOPPED, succeeded=self.succeeded, orchestrator="monarch")
