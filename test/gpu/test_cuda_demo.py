"""``python -m torch_monarch.demo --device cuda``: a short run on the GPU.

Every replica on the one GPU (round-robin over the visible GPUs), so both the
replicas' own groups and the groups across replicas take the host-staged
route. The failures include the GPU-side ones: a CUDA error in the step
(``cuda``) and a collective on CUDA tensors aborted mid-step (``comm``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from commands import repo_env, run_bounded

pytestmark = [pytest.mark.cuda, pytest.mark.timeout(420)]

def _worker_logs(out: Path, tail: int = 3000) -> str:
    """The end of every worker log of the run, to say why a replica failed."""
    parts = []
    for path in sorted(out.glob("*/replicas/*/logs/**/*")):
        if path.is_file() and path.stat().st_size > 0:
            parts.append(f"--- {path.relative_to(out)}\n{path.read_text(errors='replace')[-tail:]}")
    return "\n".join(parts)


def test_demo_on_cuda_recovers_every_failure(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    out = tmp_path / "demo"
    command = [sys.executable, "-m", "torch_monarch.demo", "--device", "cuda", "--duration", "45", "--replicas", "2",
               "--workers", "2", "--every", "10", "--kinds", "cuda,comm,kill", "--status", "log", "--out", str(out)]
    result = run_bounded(command, 400, repo_env())
    output = result.stdout
    print(output[-6000:])
    if result.returncode != 0:
        print(_worker_logs(out))
    assert result.returncode == 0, output[-5000:]
    summary = json.loads((out / "summary.json").read_text())
    kinds = {failure["kind"] for failure in summary.get("failures", [])}
    assert {"cuda", "comm"} <= kinds, summary.get("failures")
    print(json.dumps({k: v for k, v in summary.items() if k != "failures"}, indent=1))
    assert summary["failures_recovered"] == summary["failures_injected"] >= 3
    assert summary["final_params_identical"] is True
    assert (out / "timeline.png").stat().st_size > 10_000
