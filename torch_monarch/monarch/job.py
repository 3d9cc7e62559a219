"""MonarchJob: ``monarch-run --orchestrator monarch`` and the demo's Monarch phases.

The same :class:`~torch_monarch.launch.job.Job` interface (start, poll,
all_training, stop) over a real Monarch job: this process is Monarch's
client; it spawns the :class:`OrchestrationManager` in its own proc and
polls it, and shuts it down at the end. Everything else (status view, failure drills, the demo's
analysis) reads the run directory exactly as for the embedded orchestrator.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from typing import Any, Optional

from torch_monarch.launch.args import hang_config, restart_policy, sync_env
from torch_monarch.launch.job import Job, _nnodes, _scheduler_cfg
from torch_monarch.monarch._require import require_monarch
from torch_monarch.monarch.config import MonarchJobConfig, TrainerSpec
from torch_monarch.quorum.lighthouse import LighthouseConfig
from torch_monarch.supervision.failure import Failure
from torch_monarch.supervision.preload import base_preload

__all__ = ["MonarchJob", "job_config"]

logger: logging.Logger = logging.getLogger(__name__)


def job_config(args: argparse.Namespace, run_dir: str, lighthouse: LighthouseConfig, env: dict[str, str]) -> MonarchJobConfig:
    """The Monarch job that ``monarch-run``'s ``args`` describe."""
    if args.no_python:
        raise SystemExit("monarch-run: --no-python is not supported with --orchestrator monarch (trainers run Python)")
    preload = tuple(base_preload([m for m in args.preload.split(",") if m]))
    trainer = TrainerSpec(
        script=args.training_script,
        args=tuple(args.training_script_args),
        module=bool(args.module),
        nproc=int(args.nproc_per_node),
        env={**env, **sync_env(args)},
        preload=preload,
    )
    return MonarchJobConfig(
        replicas=args.replicas,
        min_replicas=args.min_replicas,
        trainer=trainer,
        run_dir=run_dir,
        policy=restart_policy(args),
        hang=hang_config(args),
        replace_replicas=args.replace_replicas,
        lighthouse=lighthouse,
        lighthouse_address=args.lighthouse,
    )


class MonarchJob(Job):
    """A job under real Monarch actors; see the module docstring."""

    def __init__(self, args: argparse.Namespace, *, lighthouse: Optional[LighthouseConfig] = None, env: Optional[dict[str, str]] = None) -> None:
        require_monarch()
        super().__init__(args, lighthouse=lighthouse, env=env)
        self.config = job_config(args, str(self.run_dir.root), self.lighthouse_config, self.env)
        self._procs: Any = None
        self._manager: Any = None
        self._state: dict[str, Any] = {}
        self._unhandled: Optional[str] = None
        self._allocation: Any = None  # SlurmHosts under --scheduler slurm

    def _on_unhandled(self, failure: Any) -> None:
        # Monarch's default ends this process; the job reports it and stops instead.
        logger.error("monarch: unhandled failure: %s", failure)
        self._unhandled = str(failure)

    def start(self) -> None:
        import monarch.actor

        from torch_monarch.monarch.hosts import host_for
        from torch_monarch.monarch.orchestration import OrchestrationManager

        monarch.actor.unhandled_fault_hook = self._on_unhandled
        self.run_dir.event("job_started", replicas=len(self.replica_ids), orchestrator="monarch", scheduler="monarch")
        hosts = self._allocate()
        self._procs = host_for(hosts, 0).spawn_procs(per_host={"procs": 1}, name="orchestration")
        self._manager = self._procs.spawn("orchestration_manager", OrchestrationManager, self.config, hosts)
        self.lighthouse_address = self._manager.start.call_one().get()
        self.started_at = time.monotonic()

    def _allocate(self) -> Any:
        """The hosts of ``--scheduler``: an allocation's HostMesh (SLURM, Kubernetes), or None for this host."""
        scheduler, cfg = self.args.scheduler, _scheduler_cfg(self.args.scheduler_cfg)
        if scheduler == "local":
            return None
        if scheduler == "slurm":
            from torch_monarch.monarch.slurm import SlurmHosts

            self._allocation = SlurmHosts(_nnodes(self.args), cfg, str(self.run_dir.root), sys.executable)
        elif scheduler == "kubernetes":
            from torch_monarch.monarch.kubernetes import KubernetesHosts

            self._allocation = KubernetesHosts(_nnodes(self.args), cfg, self.args.image)
        else:
            raise SystemExit(f"monarch-run: --orchestrator monarch runs on local, slurm or kubernetes, not {scheduler!r}")
        hosts = self._allocation.start()
        self.run_dir.event("allocation_started", scheduler=scheduler, job_id=self._allocation.job_id)
        return hosts

    def poll(self) -> bool:
        assert self._manager is not None, "start() first"
        if self._unhandled is not None:
            return False
        self._state = self._manager.poll.call_one().get()
        return bool(self._state["running"])

    @property
    def succeeded(self) -> bool:
        return self._unhandled is None and bool(self._state.get("succeeded"))

    @property
    def fatal(self) -> Optional[Failure]:
        data = self._state.get("fatal")
        return Failure.from_json(data) if data else None

    @property
    def failure_message(self) -> Optional[str]:
        return self._unhandled or self._state.get("lost")

    def _stop(self) -> None:
        if self._manager is not None:
            try:
                self._manager.shutdown.call_one().get()
            finally:
                self._procs.stop().get()
                self._manager = None
        if self._allocation is not None:
            self._allocation.stop()
            self._allocation = None
        self.run_dir.event("job_stopped", succeeded=self.succeeded, orchestrator="monarch")
