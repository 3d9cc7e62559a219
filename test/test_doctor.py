"""``python -m torch_monarch.doctor`` and the facts behind it, on a machine without a GPU."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from commands import REPO_ROOT, repo_env
from rdma_support import RDMA_ENV, requires_rdma, what_a_missing_libfabric_names
from torch_monarch import _platform, doctor



def _run_doctor(*args: str, env: dict[str, str] | None = None) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "torch_monarch.doctor", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO_ROOT,
        env=repo_env(env),
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_doctor_prints_every_section() -> None:
    text = _run_doctor()
    for label in ("built for", "collectives", "driver", "GPUs (torch)", "RDMA", "libibverbs", "transport tcp"):
        assert label in text, f"{label!r} missing from:\n{text}"


def test_doctor_json_matches_the_build() -> None:
    facts = json.loads(_run_doctor("--json"))
    gpu = facts["gpu"]
    assert gpu["platform"] in ("cpu", "cuda", "rocm")
    assert not gpu["extension_error"]
    if gpu["platform"] == "cpu":
        assert gpu["collectives_library"] == "not found"
        assert "without GPU support" in gpu["collectives_error"]
    names = [name for name, _ in facts["transports"]]
    assert names[0] == "tcp" and "rdma" in names
    libfabric = facts["libfabric"]
    assert libfabric["library"] or "libfabric" in libfabric["error"], libfabric


def test_transport_setting_follows_the_environment() -> None:
    facts = json.loads(_run_doctor("--json", env={"MONARCH_TRANSPORT": "tcp"}))
    for transport in ("same-host remote read", "shared memory"):
        use = dict(facts["transports"])[transport]
        assert use.startswith("off"), (transport, use)


def test_rdma_devices_from_sysfs(tmp_path: Path) -> None:
    port = tmp_path / "mlx5_0" / "ports" / "1"
    port.mkdir(parents=True)
    (tmp_path / "mlx5_0" / "node_guid").write_text("0c42:a103:0012:3456\n")
    (port / "state").write_text("4: ACTIVE\n")
    (port / "link_layer").write_text("InfiniBand\n")
    (port / "rate").write_text("200 Gb/sec (4X HDR)\n")
    devices, _ = _platform.rdma_devices(tmp_path)
    assert [d.name for d in devices][:1] == ["mlx5_0"]
    assert devices[0].ports == {"1": "ACTIVE InfiniBand 200 Gb/sec (4X HDR)"}
    assert devices[0].node_guid == "0c42:a103:0012:3456"


def test_no_rdma_devices(tmp_path: Path) -> None:
    devices, status = _platform.rdma_devices(tmp_path / "absent")
    assert all(d.source == "libibverbs" for d in devices)
    assert "libibverbs" in status


def test_render_without_the_extension(monkeypatch: pytest.MonkeyPatch) -> None:
    facts = doctor.collect()
    facts["gpu"].update(extension_error="no module named torch_monarch._C", platform="unknown")
    assert "did not load: no module named torch_monarch._C" in doctor.render(facts)


@requires_rdma
def test_doctor_reports_the_rdma_transport() -> None:
    env = {**RDMA_ENV, "MONARCH_RDMA_MIN_BYTES": "8192"}
    text = _run_doctor(env=env)
    assert "libfabric provider" in text and "tcp;ofi_rxm" in text, text
    use = dict(json.loads(_run_doctor("--json", env=env))["transports"])["rdma"]
    assert "by RDMA read through tcp;ofi_rxm" in use and "8192 bytes" in use, use


def test_doctor_names_a_missing_libfabric() -> None:
    library = "/nonexistent/libfabric.so.1"
    env = {"MONARCH_TRANSPORT": "rdma", "MONARCH_LIBFABRIC_LIBRARY": library}
    facts = json.loads(_run_doctor("--json", env=env))
    assert not facts["libfabric"]["library"]
    use = dict(facts["transports"])["rdma"]
    assert use.startswith("off"), use
    for words in what_a_missing_libfabric_names(library):
        assert words in use, use
