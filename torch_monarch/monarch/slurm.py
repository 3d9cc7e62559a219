"""The Monarch orchestrator's hosts from a SLURM allocation (``--orchestrator monarch --scheduler slurm``).

:func:`slurm_job` builds torchmonarch's ``monarch.job.SlurmJob`` for a job:
one SLURM job of ``nnodes`` nodes, each running a Monarch worker; the
client (``monarch-run``) attaches to them and the OrchestrationManager, its
Lighthouse and the replicas are spawned on the allocation's host mesh
instead of ``this_host()`` (:class:`~torch_monarch.monarch.client.MonarchJob`).

torchmonarch 0.7.0 reads its job from ``squeue --job ID --json`` in the
schema of SLURM 23.11+: the first job listed, its nodes in
``job_resources.nodes.allocation[].name``. SLURM 22.05 (Debian 12's) lists
every job there (``--json`` ignores the filters) and writes the nodes as
``job_resources.allocated_nodes[].nodename``. :class:`SlurmAllocation`
picks the job by id and reads both schemas.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import socket
import subprocess
from typing import Any, Mapping, Optional

from monarch._rust_bindings.monarch_hyperactor.channel import ChannelTransport
from monarch._rust_bindings.monarch_hyperactor.config import configure
from monarch.job import SlurmJob

from torch_monarch.monarch.handles import HostMesh
from torch_monarch.monarch.hosts import HOSTS_MESH
from torch_monarch.supervision.scheduler.slurm import wait_ended

__all__ = ["SlurmAllocation", "SlurmHosts", "slurm_job"]

logger: logging.Logger = logging.getLogger(__name__)

# --scheduler-cfg keys with a SlurmJob argument of their own; any other key is passed to sbatch as --key=value.
_ARGUMENTS = {"partition": "partition", "time": "time_limit", "account": "account", "qos": "qos", "mem": "mem"}


class SlurmAllocation(SlurmJob):
    """torchmonarch's SlurmJob, reading the allocation of SLURM 22.05's ``squeue --json`` too."""

    def _get_job_info_json(self, job_id: str) -> Optional[dict[str, Any]]:
        result = subprocess.run(["squeue", "--job", job_id, "--json"], capture_output=True, text=True)
        if result.returncode != 0 or not result.stdout.strip():
            logger.warning("squeue --job %s --json failed: %s", job_id, result.stderr.strip())
            return None
        try:
            jobs = json.loads(result.stdout).get("jobs", [])
        except json.JSONDecodeError as e:
            logger.warning("squeue --json for job %s: %s", job_id, e)
            return None
        info = next((job for job in jobs if str(job.get("job_id")) == job_id), None)
        resources = (info or {}).get("job_resources") or {}
        if isinstance(resources.get("nodes"), str):  # SLURM < 23.11 (openapi v0.0.38)
            allocated = resources.get("allocated_nodes") or []
            resources["nodes"] = {"allocation": [{"name": node["nodename"]} for node in allocated]}
        return info


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


def slurm_job(
    nnodes: int, cfg: Mapping[str, str], log_dir: str, python: str, start_timeout_s: Optional[int] = None
) -> SlurmAllocation:
    """The SLURM job whose ``nnodes`` hosts the Monarch orchestrator runs on.

    ``cfg`` is ``--scheduler-cfg`` (``partition=gpu,time=60,...``); the
    workers listen on ``cfg["port"]`` (default: a port free here, for a
    cluster of one machine), and run ``python``; the job may wait
    ``start_timeout_s`` in the queue (None: as long as it takes).
    """
    options = dict(cfg)
    port = int(options.pop("port", 0)) or _free_port()
    kwargs = {_ARGUMENTS[k]: options.pop(k) for k in list(options) if k in _ARGUMENTS}
    sbatch = [f"--{key}={value}" if value else f"--{key}" for key, value in options.items()]
    return SlurmAllocation(
        meshes={HOSTS_MESH: nnodes},
        python_exe=python,
        slurm_args=sbatch,
        monarch_port=port,
        job_name="monarch_orchestrator",
        log_dir=log_dir,
        exclusive=False,
        job_start_timeout=start_timeout_s,
        **kwargs,
    )


def _loopback_only_host() -> bool:
    """Whether this machine's name resolves only to loopback (a cluster of one machine, as in the tests)."""
    try:
        infos = socket.getaddrinfo(socket.gethostname(), None)
    except socket.gaierror:
        return False
    return all(ipaddress.ip_address(info[4][0]).is_loopback for info in infos)


class SlurmHosts:
    """The SLURM allocation of a Monarch-orchestrated job: submitted by :meth:`start`, cancelled by :meth:`stop`.

    Args:
        nnodes: hosts to allocate.
        cfg: ``--scheduler-cfg`` (see :func:`slurm_job`).
        log_dir: where SLURM writes the workers' output.
        python: the interpreter the workers run.
        start_timeout_s: how long the job may wait in the queue.
        stop_timeout_s: how long stopping waits for SLURM to end the job.
    """

    def __init__(
        self, nnodes: int, cfg: Mapping[str, str], log_dir: str, python: str, start_timeout_s: int = 600,
        stop_timeout_s: float = 90.0,
    ) -> None:
        self.job = slurm_job(nnodes, cfg, log_dir, python, start_timeout_s)
        self.stop_timeout_s = stop_timeout_s
        if _loopback_only_host():
            # Monarch's TCP transport refuses a hostname that resolves only to loopback;
            # on a one-machine cluster the client listens on localhost instead.
            configure(default_transport=ChannelTransport.TcpWithLocalhost)

    @property
    def job_id(self) -> Optional[str]:
        return self.job._slurm_job_id

    def start(self) -> HostMesh:
        """Submits the job, waits until its workers run, and returns their HostMesh."""
        hosts: HostMesh = getattr(self.job.state(cached_path=None), HOSTS_MESH)
        return hosts

    def stop(self) -> None:
        """Cancels the SLURM job (scancel), which ends its workers and every proc spawned on them, and waits for its end."""
        job_id = self.job_id
        self.job.kill()
        if job_id is not None and wait_ended([job_id], self.stop_timeout_s):
            logger.warning("SLURM job %s did not end within %.0fs of scancel", job_id, self.stop_timeout_s)
