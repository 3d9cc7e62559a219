"""The "embedded" job backend: torchrun's elastic agent per replica, supervised from this process.

:class:`EmbeddedJob` starts the quorum service (an embedded TorchFT
Lighthouse unless the job names one), submits one replica agent
(``python -m torch_monarch.run --replica-id I ...``, see
:mod:`torch_monarch.launch.replica_main`) per replica through the scheduler
(local processes, or a TorchX scheduler) and supervises them with the
:class:`~torch_monarch.supervision.orchestrator.Orchestrator`.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Optional

from torch_monarch.job.config import JobConfig
from torch_monarch.quorum.lighthouse import EmbeddedLighthouse
from torch_monarch.supervision.events import Event
from torch_monarch.supervision.failure import Failure
from torch_monarch.supervision.orchestrator import Orchestrator
from torch_monarch.supervision.policy import replacement_policy
from torch_monarch.supervision.rundir import RunDir
from torch_monarch.supervision.scheduler.base import ReplicaSpec, Scheduler
from torch_monarch.supervision.scheduler.local import LocalScheduler

__all__ = ["EmbeddedJob", "agent_args"]

logger: logging.Logger = logging.getLogger(__name__)

#: where replica agents look for the Lighthouse in a dry run (none is started)
_DRYRUN_LIGHTHOUSE = "http://localhost:29510"


def agent_args(config: JobConfig, replica_id: str, lighthouse: str) -> list[str]:
    """Flags of the replica agent command for ``replica_id`` (besides --nnodes/--nproc-per-node)."""
    agent = config.agent
    out = [
        "--replica-id",
        replica_id,
        "--replicas",
        str(config.replicas),
        "--min-replicas",
        str(config.min_replicas),
        "--max-restarts",
        str(config.policy.max_restarts),
        "--restart-window",
        str(config.policy.window.total_seconds()),
        "--restart-backoff",
        str(config.policy.backoff.initial.total_seconds()),
        "--hang-timeout",
        str(config.hang.progress_timeout.total_seconds()),
        "--monitor-interval",
        str(agent.monitor_interval),
        "--redirects",
        agent.redirects,
        "--tee",
        agent.tee,
    ]
    if lighthouse:
        out += ["--lighthouse", lighthouse]
    out += ["--run-dir", str(Path(config.run_dir))]
    if not config.hang.enabled:
        out.append("--no-hang-detection")
    if config.sync_mode is not None:
        out += ["--sync", config.sync_mode]
    if config.sync_every is not None:
        out += ["--sync-every", str(config.sync_every)]
    if config.trainer.preload:
        out += ["--preload", ",".join(config.trainer.preload)]
    else:
        if agent.start_method is not None:
            out += ["--start-method", agent.start_method]
        if agent.run_path:
            out.append("--run-path")
    if config.trainer.module:
        out.append("--module")
    if agent.no_python:
        out.append("--no-python")
    if agent.role != "default":
        out += ["--role", agent.role]
    out.append(config.trainer.script)
    out += list(config.trainer.args)
    return out


def _make_scheduler(config: JobConfig, run_dir: RunDir) -> Scheduler:
    if config.scheduler.name == "local":
        return LocalScheduler(run_dir)
    from torch_monarch.supervision.scheduler.torchx import TorchXScheduler

    return TorchXScheduler(config.scheduler.name, dict(config.scheduler.cfg), run_dir=run_dir)


class EmbeddedJob:
    """A job under the embedded orchestrator; see the module docstring."""

    def __init__(self, config: JobConfig) -> None:
        self.config = config
        self.run_dir = RunDir(config.run_dir)
        self.run_dir.root.mkdir(parents=True, exist_ok=True)
        self.scheduler = _make_scheduler(config, self.run_dir)
        self.lighthouse: Optional[EmbeddedLighthouse] = None
        self.lighthouse_address: str = config.lighthouse_address
        self.orchestrator: Optional[Orchestrator] = None

    def replica_specs(self) -> list[ReplicaSpec]:
        address = self.lighthouse_address or _DRYRUN_LIGHTHOUSE
        return [
            ReplicaSpec(
                replica_id=rid,
                args=agent_args(self.config, rid, address),
                env=dict(self.config.env),
                nnodes=self.config.nnodes,
                nproc_per_node=self.config.trainer.nproc,
                image=self.config.scheduler.image,
            )
            for rid in self.config.replica_ids
        ]

    def dryrun(self) -> str:
        return "\n".join(
            f"# replica {spec.replica_id} ({self.scheduler.name})\n{self.scheduler.dryrun(spec)}" for spec in self.replica_specs()
        )

    def start(self) -> None:
        if not self.lighthouse_address:
            self.lighthouse = EmbeddedLighthouse(self.config.lighthouse)
            self.lighthouse_address = self.lighthouse.address
        self.run_dir.event(
            Event.JOB_STARTED,
            replicas=self.config.replicas,
            lighthouse=self.lighthouse_address,
            orchestrator="embedded",
            scheduler=self.scheduler.name,
        )
        self.orchestrator = Orchestrator(
            self.scheduler,
            self.replica_specs(),
            min_replicas=self.config.min_replicas,
            replace_policy=replacement_policy(self.config.replace_replicas),
            run_dir=self.run_dir,
        )
        self.orchestrator.start()

    def poll(self) -> bool:
        assert self.orchestrator is not None, "start() first"
        return self.orchestrator.poll()

    @property
    def succeeded(self) -> bool:
        return self.orchestrator is not None and self.orchestrator.succeeded

    @property
    def fatal(self) -> Optional[Failure]:
        return self.orchestrator.fatal if self.orchestrator is not None else None

    @property
    def failure_message(self) -> Optional[str]:
        return None

    def stop(self) -> None:
        if self.orchestrator is not None:
            self.orchestrator.stop()
        else:
            self.scheduler.close()
        if self.lighthouse is not None:
            self.lighthouse.shutdown()
            self.lighthouse = None
        self.run_dir.event(Event.JOB_STOPPED, succeeded=self.succeeded)
