"""``python -m torch_monarch.demo``: a short smoke run (small job, short windows)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.timeout(420)


def test_demo_smoke(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    out = tmp_path / "demo"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))}
    command = [sys.executable, "-m", "torch_monarch.demo", "--duration", "16", "--replicas", "2", "--workers", "1",
               "--every", "6", "--kinds", "kill,exc", "--status", "log", "--out", str(out)]
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        output, _ = process.communicate(timeout=400)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        pytest.fail(f"demo did not finish:\n{output[-5000:]}")
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    assert process.returncode == 0, output[-5000:]
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
