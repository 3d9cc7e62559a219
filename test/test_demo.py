"""``python -m torch_monarch.demo``: a short smoke run (small job, short windows)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from commands import run_bounded

pytestmark = [pytest.mark.timeout(420), pytest.mark.newest_stack]


def test_demo_smoke(tmp_path: Path, repo_env: dict[str, str]) -> None:
    pytest.importorskip("matplotlib")
    out = tmp_path / "demo"
    command = [sys.executable, "-m", "torch_monarch.demo", "--duration", "16", "--replicas", "2", "--workers", "1",
               "--every", "6", "--kinds", "kill,exc", "--status", "log", "--out", str(out)]
    result = run_bounded(command, timeout=400, env=repo_env)
    output = result.stdout
    assert result.returncode == 0, output[-5000:]
    summary = json.loads((out / "summary.json").read_text())
    for key in ("failures_injected", "failures_recovered", "max_healthy_stall_s", "max_rejoin_s", "goodput",
                "final_params_identical", "final_loss", "baseline_final_loss", "healthy_missed_syncs", "baseline_goodput"):
        assert key in summary, key
    assert summary["sync"] == "diloco every 20 steps"  # the default
    assert sum(summary["participants_per_sync"].values()) > 0 and summary["committed_steps"] > 0
    assert summary["failures_injected"] >= 1
    assert summary["failures_recovered"] == summary["failures_injected"]
    assert summary["final_params_identical"] is True
    assert 0 < summary["goodput"] <= 1 and 0 < summary["baseline_goodput"] <= 1
    assert (out / "timeline.png").stat().st_size > 10_000
    assert "Failure timeline" in output and "Summary" in output
