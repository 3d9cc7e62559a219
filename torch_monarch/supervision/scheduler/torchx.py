"""TorchXScheduler: replicas on SLURM, Kubernetes, ... through TorchX.

Each replica becomes one TorchX ``AppDef`` whose single role runs the
replica agent (``python -m torch_monarch.run --replica-id I ...``) on
``nnodes`` hosts; multi-host replicas rendezvous like TorchX's own ``dist.ddp``
component (c10d rendezvous on the first host). TorchX's retries are off:
the orchestrator decides when a replica is replaced.

``dryrun`` returns what TorchX would submit (an sbatch script, a Volcano
job) without a cluster; ``submit`` goes through TorchX's runner, and so do
``status``/``cancel`` except on SLURM, where TorchX 0.7.0's status cannot
read a cancelled job (see :mod:`~torch_monarch.supervision.scheduler.slurm`):
there they ask SLURM directly, and cancelling waits until SLURM has ended
the jobs. A replica that escalated left its failure in the run directory,
which the cluster's nodes share with the orchestrator. Needs
``pip install torch_monarch[cluster]`` (torchx; Kubernetes also needs the
``kubernetes`` client package).
"""

from __future__ import annotations

import logging
from typing import Any, Mapping, Optional

from torch_monarch.supervision.rundir import RunDir
from torch_monarch.supervision.scheduler import slurm
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
        run_dir: the job's run directory, on a filesystem the cluster's
            nodes share: an escalated failure is read back from
            ``replicas/<id>/escalation.json``.
        cancel_timeout_s: how long cancelling waits for SLURM to end the
            jobs (SIGTERM, then SIGKILL after the cluster's ``KillWait``).
    """

    def __init__(
        self,
        scheduler: str,
        cfg: Optional[Mapping[str, Any]] = None,
        runner: Any = None,
        run_dir: Optional[RunDir] = None,
        cancel_timeout_s: float = 90.0,
    ) -> None:
        self.name = scheduler
        self.cfg = dict(cfg or {})
        self.run_dir = run_dir
        self.cancel_timeout_s = cancel_timeout_s
        self._runner = runner
        self._replica_ids: dict[str, str] = {}

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
        if self.run_dir is not None:
            self.run_dir.clear_escalation(spec.replica_id)
        handle = str(self.runner.schedule(self.dryrun_info(spec)))
        self._replica_ids[handle] = spec.replica_id
        logger.info("replica %s submitted to %s as %s", spec.replica_id, self.name, handle)
        return handle

    def status(self, handle: str) -> ReplicaStatus:
        if self.name == "slurm":
            job = slurm.job_state(_app_id(handle))
            if job is None:
                return ReplicaStatus(ReplicaState.UNKNOWN, message="SLURM does not know the job (yet)")
            state, exitcode, message = job.replica_state, job.exitcode, f"SLURM job {_app_id(handle)}: {job.name}"
        else:
            status = self.runner.status(handle)
            if status is None:
                return ReplicaStatus(ReplicaState.UNKNOWN, message="no status")
            state = _STATES.get(getattr(status.state, "name", str(status.state)), ReplicaState.UNKNOWN)
            exitcode, message = None, str(getattr(status, "msg", ""))
        failure = None
        if state is ReplicaState.FAILED and self.run_dir is not None:
            failure = self.run_dir.read_escalation(self._replica_ids.get(handle, ""))
        return ReplicaStatus(state, exitcode=exitcode, failure=failure, message=message)

    def cancel(self, handle: str) -> None:
        self.cancel_many([handle])

    def cancel_many(self, handles: list[str]) -> None:
        if self.name != "slurm":
            for handle in handles:
                self.runner.cancel(handle)
            return
        left = slurm.cancel_jobs([_app_id(h) for h in handles], self.cancel_timeout_s)
        if left:
            logger.warning("SLURM jobs %s did not end within %.0fs of scancel", left, self.cancel_timeout_s)

    def close(self) -> None:
        if self._runner is not None:
            self._runner.close()


def _app_id(handle: str) -> str:
    from torchx.specs import parse_app_handle

    return str(parse_app_handle(handle).app_id)
