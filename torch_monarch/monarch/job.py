"""MonarchJob: the "monarch" job backend (``monarch-run --orchestrator monarch``, the demo's Monarch phases).

The :class:`~torch_monarch.job.backend.JobBackend` interface over a real
Monarch job: this process is Monarch's client; it spawns the
:class:`OrchestrationManager` in its own proc, polls it, and shuts it down
at the end. Everything else (status view, failure drills, the demo's
analysis) reads the run directory exactly as for the embedded backend.
"""

from __future__ import annotations

import logging
from typing import Optional

from torch_monarch.job.config import JobConfig
from torch_monarch.monarch._require import require_monarch
from torch_monarch.monarch.config import OrchestrationStatus
from torch_monarch.monarch.handles import ActorMesh, ProcMesh
from torch_monarch.supervision.events import Event
from torch_monarch.supervision.failure import Failure
from torch_monarch.supervision.rundir import RunDir

__all__ = ["MonarchJob"]

logger: logging.Logger = logging.getLogger(__name__)


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

    def dryrun(self) -> str:
        from torch_monarch.monarch.scheduler import ReplicaActorScheduler, replica_specs

        lighthouse = self.lighthouse_address or f"a LighthouseActor (min_replicas {self.config.lighthouse.min_replicas})"
        scheduler = ReplicaActorScheduler(self.config, lighthouse)
        header = f"# OrchestrationManager: lighthouse {lighthouse}, run dir {self.config.run_dir}"
        return "\n".join([header, *(scheduler.dryrun(spec) for spec in replica_specs(self.config))])

    def _on_unhandled(self, failure: object) -> None:
        # Monarch's default ends this process; the job reports it and stops instead.
        logger.error("monarch: unhandled failure: %s", failure)
        self._unhandled = str(failure)

    def start(self) -> None:
        import monarch.actor
        from monarch.actor import this_host

        from torch_monarch.monarch.orchestration import OrchestrationManager

        monarch.actor.unhandled_fault_hook = self._on_unhandled
        self.run_dir.event(Event.JOB_STARTED, replicas=self.config.replicas, orchestrator="monarch", scheduler="monarch")
        self._procs = this_host().spawn_procs(per_host={"procs": 1}, name="orchestration")
        self._manager = self._procs.spawn("orchestration_manager", OrchestrationManager, self.config)
        self.lighthouse_address = self._manager.start.call_one().get()

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
        self.run_dir.event(Event.JOB_STOPPED, succeeded=self.succeeded, orchestrator="monarch")
