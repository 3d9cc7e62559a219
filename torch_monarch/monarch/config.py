"""What the Monarch orchestrator's actors are told: picklable job and replica settings."""

from __future__ import annotations

from dataclasses import dataclass, field

from torch_monarch.quorum.lighthouse import LighthouseConfig
from torch_monarch.supervision.policy import RestartPolicy
from torch_monarch.supervision.probes import HangConfig

__all__ = ["MonarchJobConfig", "ReplicaConfig", "TrainerSpec"]


@dataclass(frozen=True)
class TrainerSpec:
    """The training script every trainer runs (``monarch-run``'s contract).

    Attributes:
        script: path of the script, or a module name with ``module``.
        args: the script's arguments.
        module: run ``script`` as a module (``python -m``).
        nproc: trainers per replica.
        env: extra environment of every trainer.
        preload: modules a standby trainer imports before it is needed, so a
            restart does not pay for them (torch is always one).
    """

    script: str
    args: tuple[str, ...] = ()
    module: bool = False
    nproc: int = 1
    env: dict[str, str] = field(default_factory=dict)
    preload: tuple[str, ...] = ("torch",)


@dataclass(frozen=True)
class MonarchJobConfig:
    """A job of ``replicas`` replicas under an :class:`OrchestrationManager`.

    Attributes:
        replace_replicas: how often an escalated replica is replaced before
            the job goes on without it (while ``min_replicas`` remain).
        lighthouse_address: an existing Lighthouse; empty: a
            ``LighthouseActor`` with ``lighthouse``'s settings.
    """

    replicas: int
    min_replicas: int
    trainer: TrainerSpec
    run_dir: str
    policy: RestartPolicy = field(default_factory=RestartPolicy)
    hang: HangConfig = field(default_factory=HangConfig)
    replace_replicas: int = 1
    lighthouse: LighthouseConfig = field(default_factory=LighthouseConfig)
    lighthouse_address: str = ""

    def replica(self, replica_id: str, lighthouse: str) -> "ReplicaConfig":
        return ReplicaConfig(replica_id, lighthouse, self)

    @property
    def replica_ids(self) -> list[str]:
        return [str(i) for i in range(self.replicas)]


@dataclass(frozen=True)
class ReplicaConfig:
    """What one ReplicaActor is told: its id, the Lighthouse's address, and the job."""

    replica_id: str
    lighthouse: str
    job: MonarchJobConfig
