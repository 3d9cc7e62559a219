"""TorchXScheduler: replicas on SLURM, Kubernetes, ... through TorchX.

Each replica becomes one TorchX ``AppDef`` whose single role runs the
replica agent (``python -m torch_monarch.run --replica-id I ...``) on
``nnodes`` hosts; multi-host replicas rendezvous like TorchX's own ``dist.ddp``
component (c10d rendezvous on the first host). TorchX's retries are off:
the orchestrator decides when a replica is replaced.

``dryrun`` returns what TorchX would submit (an sbatch script, a Volcano
job) without a cluster; ``submit``/``status``/``cancel`` go through TorchX's
runner. Needs ``pip install torch_monarch[cluster]`` (torchx; Kubernetes
also needs the ``kubernetes`` client package).
"""

from __future__ import annotations

import logging
from typing import Any, Mapping, Optional

from torch_monarch.supervision.scheduler.base import ReplicaSpec, ReplicaState, ReplicaStatus, Scheduler

__all__ = ["TorchXScheduler", "replica_app"]

logger: logging.Logger = logging.getLogger(__name__)

_RDZV_PORT = 29500


def replica_app(spec: ReplicaSpec) -> Any:
    """The TorchX ``AppDef`` of one replica."""
    import torchx.specs as specs

    args = ["-m", "torch_monarch.run", "--nnodes", str(spec.nnodes), "--nproc-per-node", str(spec.nproc_per_node)]
    if spec.nnodes > 1:
        args += [
            "--rdzv-backend",
            "c10d",
            "--rdzv-endpoint",
            f"$${{{specs.macros.rank0_env}:=localhost}}:{_RDZV_PORT}",
            "--rdzv-id",
            f"{specs.macros.app_id}-replica{spec.replica_id}",
        ]
    role = specs.Role(
        name=f"replica{spec.replica_id}",
        image=spec.image,
        entrypoint="python",
        args=[*args, *spec.args],
        num_replicas=spec.nnodes,
        resource=specs.Resource(cpu=spec.cpu, gpu=spec.gpu, memMB=spec.mem_mb),
        env={"MONARCH_REPLICA_ID": spec.replica_id, "REPLICA_GROUP_ID": spec.replica_id, **spec.env},
        max_retries=0,
    )
    return specs.AppDef(name=f"{spec.job_name}-replica{spec.replica_id}", roles=[role])


_STATES = {
    "UNSUBMITTED": ReplicaState.PENDING,
    "SUBMITTED": ReplicaState.PENDING,
    "PENDING": ReplicaState.PENDING,
    "RUNNING": ReplicaState.RUNNING,
    "SUCCEEDED": ReplicaState.SUCCEEDED,
    "FAILED": ReplicaState.FAILED,
    "CANCELLED": ReplicaState.CANCELLED,
    "UNKNOWN": ReplicaState.UNKNOWN,
}


class TorchXScheduler(Scheduler):
    """A :class:`Scheduler` over one of TorchX's schedulers.

    Args:
        scheduler: TorchX scheduler name (``"slurm"``, ``"kubernetes"``, ...).
        cfg: that scheduler's run options (``partition``, ``queue``, ...).
        runner: a ``torchx.runner.Runner`` (default: ``get_runner()``).
    """

    def __init__(self, scheduler: str, cfg: Optional[Mapping[str, Any]] = None, runner: Any = None) -> None:
        self.name = scheduler
        self.cfg = dict(cfg or {})
        self._runner = runner

    @property
    def runner(self) -> Any:
        if self._runner is None:
            from torchx.runner import get_runner

            self._runner = get_runner()
        return self._runner

    def dryrun_info(self, spec: ReplicaSpec) -> Any:
        """TorchX's ``AppDryRunInfo`` (``.request`` is the scheduler's job request)."""
        return self.runner.dryrun(replica_app(spec), self.name, cfg=self.cfg)

    def dryrun(self, spec: ReplicaSpec) -> str:
        return str(self.dryrun_info(spec))

    def submit(self, spec: ReplicaSpec) -> str:
        handle = self.runner.schedule(self.dryrun_info(spec))
        logger.info("replica %s submitted to %s as %s", spec.replica_id, self.name, handle)
        return str(handle)

    def status(self, handle: str) -> ReplicaStatus:
        status = self.runner.status(handle)
        if status is None:
            return ReplicaStatus(ReplicaState.UNKNOWN, message="no status")
        state = _STATES.get(getattr(status.state, "name", str(status.state)), ReplicaState.UNKNOWN)
        return ReplicaStatus(state, message=str(getattr(status, "msg", "")))

    def cancel(self, handle: str) -> None:
        self.runner.cancel(handle)

    def close(self) -> None:
        if self._runner is not None:
            self._runner.close()
