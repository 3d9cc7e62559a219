"""What the Monarch orchestrator's actors are told and tell (the job itself is a :class:`~torch_monarch.job.config.JobConfig`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from torch_monarch.job.config import JobConfig
from torch_monarch.supervision.failure import Failure

__all__ = ["OrchestrationStatus", "ReplicaConfig"]


@dataclass(frozen=True)
class ReplicaConfig:
    """What one ReplicaActor is told: its id, the Lighthouse's address, and the job."""

    replica_id: str
    lighthouse: str
    job: JobConfig


@dataclass(frozen=True)
class OrchestrationStatus:
    """What one supervision pass of the OrchestrationManager found.

    Attributes:
        running: the job goes on.
        succeeded: every replica finished (or was dropped while enough remained).
        fatal: the replica failure that ended the job.
        lost: why the job ended otherwise (the Lighthouse failed).
    """

    running: bool
    succeeded: bool = False
    fatal: Optional[Failure] = None
    lost: Optional[str] = None
