"""Schedulers that run replica agents: local processes, or TorchX's (SLURM, Kubernetes, ...)."""

from torch_monarch.supervision.scheduler.base import ReplicaSpec, ReplicaState, ReplicaStatus, Scheduler
from torch_monarch.supervision.scheduler.local import LocalScheduler

__all__ = ["LocalScheduler", "ReplicaSpec", "ReplicaState", "ReplicaStatus", "Scheduler", "TorchXScheduler"]


def __getattr__(name: str) -> object:
    # TorchX is an optional dependency: import it only when asked for.
    if name == "TorchXScheduler":
        from torch_monarch.supervision.scheduler.torchx import TorchXScheduler

        return TorchXScheduler
    raise AttributeError(name)
