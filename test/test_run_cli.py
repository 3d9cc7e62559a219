"""``monarch-run`` / ``python -m torch_monarch.run``: torchrun compatibility, replica groups, drills, dry runs."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from commands import REPO_ROOT, repo_env, run_bounded

STEPS = Path(__file__).resolve().parent / "scripts" / "supervised_steps.py"
TRAIN = REPO_ROOT / "torch_monarch" / "demo" / "train.py"

pytestmark = pytest.mark.timeout(240)


def run(command: list[str], timeout: float = 200, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return run_bounded(command, timeout, repo_env(env))


def monarch_run(*argv: str, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return run([sys.executable, "-m", "torch_monarch.run", *argv], **kwargs)


def events(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines() if line.strip()]


def test_help_lists_torchrun_and_replica_flags() -> None:
    out = monarch_run("--help", timeout=60).stdout
    for flag in ("--nnodes", "--nproc-per-node", "--rdzv-endpoint", "--max-restarts", "--replicas", "--min-replicas",
                 "--lighthouse", "--inject-failures", "--restart-backoff", "--status"):
        assert flag in out


def test_console_script_if_installed() -> None:
    exe = shutil.which("monarch-run")
    if exe is None:
        pytest.skip("package not installed with its console scripts (pip install -e .)")
    assert run([exe, "--help"], timeout=60).returncode == 0


def test_dryrun_prints_cluster_job_specs(tmp_path: Path) -> None:
    pytest.importorskip("torchx")
    result = monarch_run("--replicas", "2", "--nproc-per-node", "4", "--scheduler", "slurm", "--dryrun",
                         "--lighthouse", "http://lh:29510", "--run-dir", str(tmp_path), "train.py", "--lr", "1", timeout=60)
    assert result.returncode == 0, result.stdout
    assert result.stdout.count("#SBATCH") == 2
    assert "--replica-id 0" in result.stdout and "--replica-id 1" in result.stdout
    assert "--lighthouse http://lh:29510" in result.stdout and "train.py --lr 1" in result.stdout


def test_single_replica_is_torchrun_compatible(tmp_path: Path) -> None:
    # Same flags as torchrun; the worker sees torchrun's environment.
    result = monarch_run("--nnodes", "1", "--nproc-per-node", "2", "--run-dir", str(tmp_path), str(STEPS), "--steps", "5")
    assert result.returncode == 0, result.stdout[-4000:]
    assert "rank 0 attempt 0 done" in result.stdout and "rank 1 attempt 0 done" in result.stdout


def test_plain_torchrun_runs_a_supervised_monarch_script() -> None:
    # No monarch-run: the supervision API is a no-op, the monarch backend works as always.
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    result = run([*torchrun, str(STEPS), "--steps", "5"], timeout=150)
    assert result.returncode == 0, result.stdout[-4000:]
    assert "rank 1 attempt 0 done" in result.stdout


@pytest.mark.newest_stack
def test_two_replicas_recover_from_an_injected_kill(tmp_path: Path) -> None:
    result = monarch_run(
        "--replicas", "2", "--nproc-per-node", "1", "--min-replicas", "1", "--status", "log",
        "--preload", "torch_monarch.demo.warmup", "--run-dir", str(tmp_path),
        "--inject-failures", "every=2s,kinds=kill,count=1,seed=0", "--sync", "per-step",
        str(TRAIN),
        # Long enough that the kill 2 s in always lands mid-training, even on
        # a fast, idle machine.
        env={"MONARCH_DEMO_MAX_STEPS": "1500"},
    )
    assert result.returncode == 0, result.stdout[-5000:]
    log = events(tmp_path)
    (inject,) = [e for e in log if e["event"] == "inject"]
    victim = inject["replica"]
    after = [e for e in log if e["t"] >= inject["t"] and str(e.get("replica")) == victim]
    names = [e["event"] for e in after]
    for name in ("detected", "restart_scheduled", "workers_started", "healed", "rejoined"):
        assert name in names, names
    detected = next(e for e in after if e["event"] == "detected")
    assert detected["kind"] == "signal" and detected["signal"] == "SIGKILL"
    assert "injected kill into replica" in result.stdout  # the status view's log
    finals = [torch.load(tmp_path / "final" / f"replica_{r}_rank_0.pt") for r in (0, 1)]
    assert finals[0]["step"] == finals[1]["step"] == 1500
    assert all(torch.equal(finals[0]["model"][k], finals[1]["model"][k]) for k in finals[0]["model"])


def test_escalation_replaces_then_drops_then_fails(tmp_path: Path) -> None:
    # Every attempt of every replica fails: each replica agent escalates at once (no restarts
    # left), the orchestrator replaces each replica once, then goes on without one (>= 1 left),
    # and fails the job when the last one escalates too.
    result = monarch_run(
        "--replicas", "2", "--nproc-per-node", "1", "--min-replicas", "1", "--max-restarts", "0",
        "--replace-replicas", "1", "--status", "log", "--preload", "torch,torch_monarch", "--run-dir", str(tmp_path),
        str(STEPS), "--fail", "exc", "--fail-rank", "0", "--fail-step", "0", "--fail-attempts", "always",
    )
    assert result.returncode == 1, result.stdout[-4000:]
    names = [e["event"] for e in events(tmp_path)]
    assert names.count("replica_submitted") == 4  # 2 first allocations + 2 replacements
    assert names.count("replica_replacing") == 2
    assert names.count("replica_dropped") == 1
    assert names.count("job_failed") == 1
    assert "job failed" in result.stdout and "planned failure in fail_here" in result.stdout
