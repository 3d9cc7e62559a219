"""JobConfig: one job of replica groups, as every orchestrator backend reads it.

Plain, picklable values (the Monarch backend ships the config to its
actors); no argparse. :func:`torch_monarch.launch.config.job_config` builds
it from ``monarch-run``'s flags.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from torch_monarch.quorum.lighthouse import LighthouseConfig
from torch_monarch.supervision.policy import RestartPolicy
from torch_monarch.supervision.preload import base_preload, worker_args_env
from torch_monarch.supervision.probes import HangConfig

__all__ = ["AgentFlags", "JobConfig", "SchedulerChoice", "TrainerSpec", "sync_env"]


@dataclass(frozen=True)
class TrainerSpec:
    """The training script every worker runs (``monarch-run``'s contract).

    Attributes:
        script: path of the script, or a module name with ``module``.
        args: the script's arguments.
        module: run ``script`` as a module (``python -m``).
        nproc: workers per replica and host.
        preload: modules imported once before workers start (a forkserver
            or a standby trainer), so a restart does not pay for them.
    """

    script: str
    args: tuple[str, ...] = ()
    module: bool = False
    nproc: int = 1
    preload: tuple[str, ...] = ()

    @property
    def standby_imports(self) -> tuple[str, ...]:
        """What a standby trainer imports before it is needed: every forkserver's modules, then ``preload``."""
        return tuple(base_preload(self.preload))


@dataclass(frozen=True)
class AgentFlags:
    """torchrun's per-host agent flags a replica agent is started with (the embedded backend).

    Attributes mirror torchrun's flags of the same names.
    """

    monitor_interval: float = 0.1
    redirects: str = "0"
    tee: str = "0"
    #: None: the replica agent decides (a forkserver on GPU hosts, else spawn)
    start_method: Optional[str] = None
    run_path: bool = False
    no_python: bool = False
    role: str = "default"


@dataclass(frozen=True)
class SchedulerChoice:
    """Where the embedded backend's replica agents run.

    Attributes:
        name: "local", or a TorchX scheduler (slurm, kubernetes, ...).
        cfg: the TorchX scheduler's run options.
        image: container image or working directory (cluster schedulers).
    """

    name: str = "local"
    cfg: dict[str, str] = field(default_factory=dict)
    image: str = ""


@dataclass(frozen=True)
class JobConfig:
    """A job of ``replicas`` replica groups of ``nnodes`` hosts × ``trainer.nproc`` workers.

    Attributes:
        orchestrator: the backend that runs it (a name registered in
            :mod:`torch_monarch.launch.backends`).
        min_replicas: fewest replicas a quorum may have and the job may go on with.
        run_dir: the job's run directory.
        policy: a replica's restarts in place.
        hang: the hang probe's settings.
        replace_replicas: how often an escalated replica is replaced before
            the job goes on without it (while ``min_replicas`` remain).
        lighthouse: settings of the Lighthouse the job starts itself.
        lighthouse_address: an existing Lighthouse; empty: start one.
        env: extra environment of every worker.
        sync_mode, sync_every: ``--sync``/``--sync-every`` when given
            (the workers' ``MONARCH_SYNC_*``; None: the script's default).
    """

    replicas: int
    min_replicas: int
    trainer: TrainerSpec
    run_dir: str
    orchestrator: str = "embedded"
    nnodes: int = 1
    policy: RestartPolicy = field(default_factory=RestartPolicy)
    hang: HangConfig = field(default_factory=HangConfig)
    replace_replicas: int = 1
    lighthouse: LighthouseConfig = field(default_factory=LighthouseConfig)
    lighthouse_address: str = ""
    env: dict[str, str] = field(default_factory=dict)
    sync_mode: Optional[str] = None
    sync_every: Optional[int] = None
    scheduler: SchedulerChoice = field(default_factory=SchedulerChoice)
    agent: AgentFlags = field(default_factory=AgentFlags)

    @property
    def replica_ids(self) -> list[str]:
        return [str(i) for i in range(self.replicas)]

    def worker_env(self) -> dict[str, str]:
        """Everything a worker's environment (and its forkserver's) gets from the job (besides its identity)."""
        return {**self.env, **sync_env(self.sync_mode, self.sync_every), **worker_args_env(self.trainer.args)}


def sync_env(mode: Optional[str], every: Optional[int]) -> dict[str, str]:
    """The workers' ``MONARCH_SYNC_*`` for the sync settings given (None: the script's default)."""
    env = {}
    if mode is not None:
        env["MONARCH_SYNC_MODE"] = mode
    if every is not None:
        env["MONARCH_SYNC_EVERY"] = str(every)
    return env
