"""SLURM and Kubernetes replicas through TorchX: the job specs, generated in a dry run (no cluster)."""

from __future__ import annotations

import pytest

pytest.importorskip("torchx")

from torch_monarch.supervision.scheduler.base import ReplicaSpec
from torch_monarch.supervision.scheduler.torchx import TorchXScheduler

pytestmark = pytest.mark.timeout(60)

SPEC = ReplicaSpec(
    replica_id="2",
    args=["--replica-id", "2", "--lighthouse", "http://lh:29510", "train.py", "--lr", "0.1"],
    env={"MONARCH_HEARTBEAT_TIMEOUT": "2"},
    nproc_per_node=4,
    cpu=8,
    mem_mb=16384,
    image="/shared/job",
)


def test_slurm_sbatch_script() -> None:
    info = TorchXScheduler("slurm", {"partition": "train"}).dryrun_info(SPEC)
    script = info.request.materialize()
    assert "#SBATCH" in script and "--partition=train" in script
    assert "--cpus-per-task=8" in script and "--mem=16384" in script
    assert "python -m torch_monarch.run --nnodes 1 --nproc-per-node 4 --replica-id 2" in script
    assert "--lighthouse http://lh:29510 train.py --lr 0.1" in script
    assert "MONARCH_REPLICA_ID=2" in script and "MONARCH_HEARTBEAT_TIMEOUT=2" in script
    # TorchX must not retry on its own: the orchestrator decides replacements.
    assert "TORCHX_MAX_RETRIES=0" in script


def test_kubernetes_volcano_job() -> None:
    pytest.importorskip("kubernetes")
    spec = ReplicaSpec(**{**SPEC.__dict__, "nnodes": 2})
    job = TorchXScheduler("kubernetes", {"queue": "default"}).dryrun_info(spec).request
    resource = job.resource
    assert resource["kind"] == "Job" and resource["apiVersion"].startswith("batch.volcano.sh")
    assert resource["spec"]["maxRetry"] == 0
    tasks = resource["spec"]["tasks"]
    assert len(tasks) == 2  # one replica agent per host
    container = tasks[0]["template"].spec.containers[0]
    assert container.image == "/shared/job"
    command = container.command
    assert command[:3] == ["python", "-m", "torch_monarch.run"]
    assert command[command.index("--nnodes") + 1] == "2"
    assert command[command.index("--rdzv-backend") + 1] == "c10d"
    endpoint = command[command.index("--rdzv-endpoint") + 1]
    assert endpoint.endswith(":29500") and "TORCHX_RANK0_HOST" in endpoint
    env = {e.name: e.value for e in container.env}
    assert env["MONARCH_REPLICA_ID"] == "2" and env["REPLICA_GROUP_ID"] == "2"
    assert container.resources.limits["cpu"] == "8000m"


def _as_model(data: object, model: str) -> object:
    """``data`` (what goes to the API server) parsed as the Kubernetes client's ``model``, with its validation."""
    import json

    from kubernetes.client import ApiClient

    class _Response:
        def __init__(self, body: object) -> None:
            self.data = json.dumps(body)

    return ApiClient().deserialize(_Response(data), model)


def test_kubernetes_pod_templates_are_valid_kubernetes_models() -> None:
    pytest.importorskip("kubernetes")
    from kubernetes.client import ApiClient, V1PodTemplateSpec

    spec = ReplicaSpec(**{**SPEC.__dict__, "nnodes": 2})
    resource = TorchXScheduler("kubernetes", {"queue": "default"}).dryrun_info(spec).request.resource
    wire = ApiClient().sanitize_for_serialization(resource)  # the JSON the API server receives
    for task in wire["spec"]["tasks"]:
        template = _as_model(task["template"], "V1PodTemplateSpec")
        assert isinstance(template, V1PodTemplateSpec)
        (container,) = template.spec.containers
        assert container.command[:3] == ["python", "-m", "torch_monarch.run"]
        assert container.resources.limits["memory"] == "16384M" and container.resources.requests["cpu"]
        assert template.spec.restart_policy == "Never"  # a failed replica is the orchestrator's to replace
    # A template missing what Kubernetes requires does not pass the client's validation.
    broken = dict(wire["spec"]["tasks"][0]["template"])
    broken["spec"] = {**broken["spec"], "containers": [{"image": "x"}]}  # no container name
    with pytest.raises(ValueError, match="name"):
        _as_model(broken, "V1PodTemplateSpec")
