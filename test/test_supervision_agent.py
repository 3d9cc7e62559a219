"""A replica's workers under the supervised elastic agent (``monarch-run``, one replica).

Each case makes rank 1 fail one way on the first attempt; the supervisor must
see the failure as what it was (with its evidence), restart the workers in
place, and the job must then succeed. Past the restart policy it escalates.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from commands import repo_env, run_bounded

SCRIPT = Path(__file__).resolve().parent / "scripts" / "supervised_steps.py"
TIMEOUT_S = 150

pytestmark = pytest.mark.timeout(TIMEOUT_S + 30)


def run_cli(argv: list[str], run_dir: Path, timeout: float = TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    """Runs ``python -m torch_monarch.run`` in its own session; kills that session on timeout."""
    return run_bounded([sys.executable, "-m", "torch_monarch.run", "--run-dir", str(run_dir), *argv], timeout, repo_env())


def events(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines() if line.strip()]


def detected(run_dir: Path) -> list[dict[str, Any]]:
    return [e for e in events(run_dir) if e["event"] == "detected"]


COMMON = ["--nproc-per-node", "2", "--max-restarts", "2", "--restart-backoff", "0.1", "--preload", "torch,torch_monarch"]


@pytest.mark.parametrize(
    "kind, expected_kind, evidence",
    [
        ("exc", "exception", "planned failure in fail_here"),
        ("segv", "signal", "Fatal Python error: Segmentation fault"),
        ("exit", "exit_code", "exited with code 7"),
    ],
)
def test_failure_is_reported_and_replica_restarts(tmp_path: Path, kind: str, expected_kind: str, evidence: str) -> None:
    result = run_cli([*COMMON, str(SCRIPT), "--fail", kind], tmp_path)
    assert result.returncode == 0, result.stdout[-5000:]
    (first, *_) = detected(tmp_path)
    assert first["kind"] == expected_kind
    assert first["rank"] == 1
    text = first["message"] + first["traceback"]
    assert evidence in text
    if kind in ("exc", "segv"):
        assert "fail_here" in first["traceback"]  # the failing frame, from the traceback or faulthandler
    starts = [e for e in events(tmp_path) if e["event"] == "workers_started"]
    assert [e["attempt"] for e in starts] == [0, 1]
    assert "rank 1 attempt 1 done" in result.stdout


def test_hung_worker_is_detected_and_killed(tmp_path: Path) -> None:
    result = run_cli([*COMMON, str(SCRIPT), "--fail", "hang"], tmp_path)
    assert result.returncode == 0, result.stdout[-5000:]
    kinds = [e["kind"] for e in detected(tmp_path)]
    assert kinds[0] == "hang"
    assert any(e["event"] == "hang_detected" for e in events(tmp_path))


def test_collective_failure_restarts_the_replica(tmp_path: Path) -> None:
    result = run_cli([*COMMON, str(SCRIPT), "--fail", "comm"], tmp_path)
    assert result.returncode == 0, result.stdout[-5000:]
    errors = [e for e in events(tmp_path) if e["event"] == "worker_error"]
    assert errors and all(e["kind"] == "collective" for e in errors)
    peer = [e for e in errors if e["rank"] == 0]
    assert peer and peer[0]["failed_ranks"] == [1]  # the backend named the aborted rank


def test_escalates_past_the_restart_policy(tmp_path: Path) -> None:
    argv = ["--nproc-per-node", "2", "--max-restarts", "1", "--restart-backoff", "0", "--preload", "torch,torch_monarch"]
    result = run_cli([*argv, str(SCRIPT), "--fail", "exc", "--fail-attempts", "always"], tmp_path)
    assert result.returncode != 0
    escalation = json.loads((tmp_path / "replicas" / "0" / "escalation.json").read_text())
    assert escalation["kind"] == "exception" and "planned failure" in escalation["message"]
    assert any(e["event"] == "escalated" for e in events(tmp_path))
    assert len([e for e in events(tmp_path) if e["event"] == "workers_started"]) == 2
