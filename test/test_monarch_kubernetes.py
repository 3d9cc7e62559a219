"""``--orchestrator monarch --scheduler kubernetes``: torchmonarch's KubernetesJob, as a dry run.

No Kubernetes cluster can run here. The test captures the ``MonarchMesh``
resource that :func:`torch_monarch.monarch.kubernetes.kubernetes_job`'s
job submits (the Kubernetes API is replaced by a recorder) and validates its
pod template against the Kubernetes client's models.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

pytest.importorskip("monarch.job")
kubernetes = pytest.importorskip("kubernetes")

from torch_monarch.monarch.kubernetes import kubernetes_job  # noqa: E402

pytestmark = pytest.mark.timeout(60)


class _Recorder:
    """Stands in for the Kubernetes API: records what would be created."""

    created: list[dict[str, Any]] = []

    def __init__(self, api_client: Any = None) -> None:
        pass

    def get_namespaced_custom_object(self, **kwargs: Any) -> None:
        raise kubernetes.client.exceptions.ApiException(status=404)

    def create_namespaced_custom_object(self, body: dict[str, Any], **kwargs: Any) -> None:
        self.created.append({"body": body, **kwargs})


def _as_pod_template(data: object) -> Any:
    class _Response:
        def __init__(self, body: object) -> None:
            self.data = json.dumps(body)

    return kubernetes.client.ApiClient().deserialize(_Response(data), "V1PodTemplateSpec")


def test_monarch_mesh_resource_is_valid(monkeypatch: pytest.MonkeyPatch) -> None:
    import monarch._src.job.kubernetes as monarch_kubernetes

    job = kubernetes_job(2, {"namespace": "train", "cpu": "8", "memory": "64Gi"}, "ghcr.io/org/trainer:1")
    monkeypatch.setattr(monarch_kubernetes.client, "CustomObjectsApi", _Recorder)
    monkeypatch.setattr(monarch_kubernetes.KubeConfig, "load", lambda self: None)
    _Recorder.created.clear()
    job.apply()
    (request,) = _Recorder.created
    body = request["body"]
    assert (request["group"], request["version"], request["plural"]) == ("monarch.pytorch.org", "v1alpha1", "monarchmeshes")
    assert body["kind"] == "MonarchMesh" and body["metadata"] == {"name": "hosts", "namespace": "train"}
    assert body["spec"]["replicas"] == 2
    template = _as_pod_template(body["spec"]["podTemplate"])
    (container,) = template.spec.containers
    assert container.image == "ghcr.io/org/trainer:1"
    assert container.resources.limits == container.resources.requests == {"cpu": "8", "memory": "64Gi"}
    assert "run_worker_loop_forever" in container.command[-1]


def test_kubernetes_job_needs_an_image() -> None:
    with pytest.raises(ValueError, match="needs --image"):
        kubernetes_job(1, {}, "")
