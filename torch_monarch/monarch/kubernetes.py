"""The Monarch orchestrator's hosts on Kubernetes (``--orchestrator monarch --scheduler kubernetes``).

:func:`kubernetes_job` builds torchmonarch's ``monarch.job.KubernetesJob``
with one provisioned mesh of ``nnodes`` worker pods running ``--image``:
the job creates a ``MonarchMesh`` resource and Monarch's operator starts the
pods; the OrchestrationManager, its Lighthouse and the replicas are then
spawned on them, as on a SLURM allocation (:mod:`torch_monarch.monarch.slurm`).
``--scheduler-cfg`` gives the namespace (``namespace=train``) and the pods'
resource requests and limits (``cpu=8,memory=64Gi,nvidia.com/gpu=8``).
"""

from __future__ import annotations

from typing import Any, Mapping

from monarch.job.kubernetes import ImageSpec, KubernetesJob

from torch_monarch.monarch.handles import HostMesh
from torch_monarch.monarch.hosts import HOSTS_MESH

__all__ = ["KubernetesHosts", "kubernetes_job"]


def kubernetes_job(nnodes: int, cfg: Mapping[str, str], image: str, start_timeout_s: int = 600) -> KubernetesJob:
    """The KubernetesJob of ``nnodes`` worker pods the Monarch orchestrator runs on."""
    if not image:
        raise ValueError("--scheduler kubernetes needs --image (the worker pods' container image)")
    resources: dict[str, Any] = dict(cfg)
    namespace = str(resources.pop("namespace", "default"))
    job = KubernetesJob(namespace=namespace, timeout=start_timeout_s)
    job.add_mesh(HOSTS_MESH, nnodes, image_spec=ImageSpec(image, resources=resources or None))
    return job


class KubernetesHosts:
    """The worker pods of a Monarch-orchestrated job: created by :meth:`start`, deleted by :meth:`stop`."""

    def __init__(self, nnodes: int, cfg: Mapping[str, str], image: str) -> None:
        self.job = kubernetes_job(nnodes, cfg, image)
        self.job_id = HOSTS_MESH

    def start(self) -> HostMesh:
        """Creates the MonarchMesh, waits until its pods are ready, and returns their HostMesh."""
        hosts: HostMesh = getattr(self.job.state(cached_path=None), HOSTS_MESH)
        return hosts

    def stop(self) -> None:
        self.job.kill()
