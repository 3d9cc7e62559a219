"""The ``Scheduler`` interface: how the orchestrator gets replicas run.

A scheduler runs one *replica agent* per replica: the command
``python -m torch_monarch.run --replica-id I ...``, which supervises that
replica's workers (``run_replica``). The orchestrator only submits, polls,
cancels, and resubmits when it replaces a replica (a new allocation).

Implementations: :class:`~torch_monarch.supervision.scheduler.local.LocalScheduler`
(processes on this host) and
:class:`~torch_monarch.supervision.scheduler.torchx.TorchXScheduler`
(SLURM, Kubernetes and the rest of TorchX's schedulers).
"""

from __future__ import annotations

import abc
import enum
from dataclasses import dataclass, field
from typing import Optional

from torch_monarch.supervision.failure import Failure

__all__ = ["ReplicaSpec", "ReplicaState", "ReplicaStatus", "Scheduler", "replica_command"]


@dataclass
class ReplicaSpec:
    """One replica group, as a scheduler sees it.

    Attributes:
        replica_id: the replica's id (``--replica-id``).
        args: arguments of ``python -m torch_monarch.run`` for this replica
            besides ``--nnodes``/``--nproc-per-node`` (replica flags, the
            training script and its arguments).
        env: environment for the replica agent and its workers.
        nnodes: hosts of the replica (one agent each).
        nproc_per_node: workers per host.
        cpu, gpu, mem_mb: resources per host (cluster schedulers).
        image: container image or working directory (cluster schedulers).
        job_name: name of the job in the scheduler.
    """

    replica_id: str
    args: list[str]
    env: dict[str, str] = field(default_factory=dict)
    nnodes: int = 1
    nproc_per_node: int = 1
    cpu: int = 2
    gpu: int = 0
    mem_mb: int = 4096
    image: str = ""
    job_name: str = "monarch"


def replica_command(spec: ReplicaSpec, python: str = "python") -> list[str]:
    """The replica agent's command line on one host."""
    return [
        python,
        "-m",
        "torch_monarch.run",
        "--nnodes",
        str(spec.nnodes),
        "--nproc-per-node",
        str(spec.nproc_per_node),
        *spec.args,
    ]


class ReplicaState(str, enum.Enum):
    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    UNKNOWN = "unknown"

    @property
    def terminal(self) -> bool:
        return self in (ReplicaState.SUCCEEDED, ReplicaState.FAILED, ReplicaState.CANCELLED)


@dataclass
class ReplicaStatus:
    """What a scheduler knows about a submitted replica."""

    state: ReplicaState
    exitcode: Optional[int] = None
    #: the failure the replica agent escalated, when the scheduler can read it
    failure: Optional[Failure] = None
    message: str = ""


class Scheduler(abc.ABC):
    """Runs replica agents; see the module docstring."""

    name: str = "scheduler"

    @abc.abstractmethod
    def submit(self, spec: ReplicaSpec) -> str:
        """Starts a replica agent; returns an opaque handle."""

    @abc.abstractmethod
    def status(self, handle: str) -> ReplicaStatus:
        """The replica's current state; never blocks for long."""

    @abc.abstractmethod
    def cancel(self, handle: str) -> None:
        """Stops the replica agent and its workers."""

    def cancel_many(self, handles: list[str]) -> None:
        """Stops several replicas (a scheduler may do it in parallel)."""
        for handle in handles:
            self.cancel(handle)

    @abc.abstractmethod
    def dryrun(self, spec: ReplicaSpec) -> str:
        """What ``submit`` would run, as the scheduler's own job spec."""

    def close(self) -> None:
        """Releases the scheduler (cancels what it still runs, where it can)."""
