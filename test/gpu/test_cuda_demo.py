"""``python -m torch_monarch.demo --device cuda`` at its defaults meets the GPU targets (issue 26).

4 replicas x 2 workers on the one GPU (round-robin over the visible GPUs),
DiLoCo every 20 steps, a failure every 20 s of the default GPU kinds (in
120 s the first five: kill, segv, hang, comm (a collective on CUDA tensors
aborted mid-step), exc), then the same run without failures. Workers fork from the preloaded,
CUDA-clean forkserver. Asserted: every target of the demo's summary (every
failure recovered, no missed outer sync, goodput >= 0.95, identical final
parameters, final loss within 10 %) and the GPU's rejoin target, a median
of at most 3 s.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from commands import repo_env, run_bounded

pytestmark = [pytest.mark.cuda, pytest.mark.timeout(600)]

#: issue 26: the failed replica back in an outer sync within 3 s (median) on the GPU
GPU_MEDIAN_REJOIN_S = 3.0


def _worker_logs(out: Path, tail: int = 3000) -> str:
    """The end of every worker log of the run, to say why a replica failed."""
    parts = []
    for path in sorted(out.glob("*/replicas/*/logs/**/*")):
        if path.is_file() and path.stat().st_size > 0:
            parts.append(f"--- {path.relative_to(out)}\n{path.read_text(errors='replace')[-tail:]}")
    return "\n".join(parts)


def test_demo_on_cuda_meets_its_targets(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    out = tmp_path / "demo"
    command = [sys.executable, "-m", "torch_monarch.demo", "--device", "cuda", "--status", "log", "--out", str(out)]
    result = run_bounded(command, 570, repo_env())
    output = result.stdout
    print(output[-6000:])
    summary = json.loads((out / "summary.json").read_text()) if (out / "summary.json").exists() else {}
    if result.returncode != 0 or not all(summary.get("targets", {}).values()):
        print(_worker_logs(out))
    assert summary, output[-5000:]
    # A failure every 20 s in the default order (kill, segv, hang, comm, exc, cuda) until 15 s before the end:
    # the default 120 s inject the first five, the collective aborted on CUDA tensors among them.
    kinds = [failure["kind"] for failure in summary["failures"]]
    assert kinds == ["kill", "segv", "hang", "comm", "exc"], kinds
    missed = [name for name, ok in summary["targets"].items() if not ok]
    assert not missed, {k: v for k, v in summary.items() if k != "failures"}
    assert summary["median_rejoin_s"] <= GPU_MEDIAN_REJOIN_S, summary["median_rejoin_s"]
    assert result.returncode == 0, output[-5000:]
    assert (out / "timeline.png").stat().st_size > 10_000
