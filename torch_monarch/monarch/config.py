"""What one ReplicaActor is told (the job itself is a :class:`~torch_monarch.job.config.JobConfig`)."""

from __future__ import annotations

from dataclasses import dataclass

from torch_monarch.job.config import JobConfig

__all__ = ["ReplicaConfig"]


@dataclass(frozen=True)
class ReplicaConfig:
    """What one ReplicaActor is told: its id, the Lighthouse's address, and the job."""

    replica_id: str
    lighthouse: str
    job: JobConfig
