"""Failure drills of ``monarch-run --scheduler slurm`` on the test cluster (``slurm_cluster.py``), for both orchestrators.

:class:`DrillRun` runs ``monarch-run`` with two replicas of the demo's
trainer in a session of its own, bounded by ``BOUND_S``; the trainer runs
until told to stop (``control.json``), so a drill waits for the recovery,
then stops every replica at the same step. The assertions are the drills'
common ones: identical final parameters, the survivor trained on, nothing
left on the cluster.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
import torch
from commands import REPO_ROOT, repo_env
from slurm_cluster import SlurmCluster

from torch_monarch.launch.status_view import replica_rows
from torch_monarch.supervision.rundir import RunDir, write_json

__all__ = ["BOUND_S", "DrillRun", "assert_identical_finals", "assert_nothing_left", "assert_survivor_kept_training",
           "drill_run", "steps_of"]

TRAIN = REPO_ROOT / "torch_monarch" / "demo" / "train.py"
BOUND_S = 200  # each drill's bound: from monarch-run's start to its exit


class DrillRun:
    """``monarch-run --scheduler slurm`` with two replicas of the demo's trainer, in a session of its own.

    The trainer runs until told to stop (``control.json``), so a drill can wait
    for the recovery, then stop every replica at the same step.
    """

    def __init__(self, tmp_path: Path, *argv: str) -> None:
        self.run_dir = tmp_path / "run"
        self.deadline = time.monotonic() + BOUND_S
        command = [
            sys.executable, "-m", "torch_monarch.run", "--scheduler", "slurm", "--replicas", "2", "--nproc-per-node", "1",
            "--min-replicas", "1", "--status", "log", "--sync", "per-step", "--preload", "torch_monarch.demo.warmup",
            "--run-dir", str(self.run_dir), *argv, str(TRAIN),
        ]
        # The sbatch script runs `python` on the nodes: this interpreter's.
        path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
        self.process = subprocess.Popen(
            command, env=repo_env({"PATH": path}), cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True, start_new_session=True,
        )
        self.output = ""

    def events(self) -> list[dict[str, Any]]:
        path = self.run_dir / "events.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []

    def wait_for(self, predicate: Callable[[], bool], what: str) -> None:
        while not predicate():
            if self.process.poll() is not None:
                pytest.fail(f"monarch-run exited ({self.process.returncode}) before {what}:\n{self.finish()[-5000:]}")
            if time.monotonic() > self.deadline:
                pytest.fail(f"no {what} within {BOUND_S}s")
            time.sleep(0.2)

    def both_training_together(self) -> bool:
        rows = replica_rows(RunDir(self.run_dir), ["0", "1"])
        return all(r.state == "training" and r.participants == 2 for r in rows)

    def rejoined_after(self, replica: str, t: float) -> bool:
        return any(e["event"] == "rejoined" and e["replica"] == replica and e["t"] > t for e in self.events()) and \
            self.both_training_together()

    def stop_and_finish(self) -> str:
        """Every replica stops a few steps ahead of the furthest one; returns monarch-run's output."""
        steps = [r.step or 0 for r in replica_rows(RunDir(self.run_dir), ["0", "1"])]
        write_json(self.run_dir / "control.json", {"start": True, "stop_at_step": max(steps) + 10})
        output = self.finish()
        assert self.process.returncode == 0, output[-5000:]
        return output

    def finish(self) -> str:
        try:
            self.output, _ = self.process.communicate(timeout=max(1.0, self.deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.kill()
            pytest.fail(f"monarch-run did not finish within {BOUND_S}s")
        return self.output

    def kill(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.output, _ = self.process.communicate()


@pytest.fixture
def drill_run(tmp_path: Path) -> Iterator[Callable[..., DrillRun]]:
    runs: list[DrillRun] = []

    def start(*argv: str) -> DrillRun:
        runs.append(DrillRun(tmp_path, *argv))
        return runs[-1]

    yield start
    for r in runs:
        r.kill()  # a failed test's monarch-run; the cluster cancels its jobs


def steps_of(run_dir: Path, replica: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "replicas" / replica / "steps.jsonl").read_text().splitlines()]


def assert_identical_finals(run_dir: Path) -> None:
    finals = [torch.load(run_dir / "final" / f"replica_{r}_rank_0.pt") for r in ("0", "1")]
    assert finals[0]["step"] == finals[1]["step"]
    assert all(torch.equal(finals[0]["model"][k], finals[1]["model"][k]) for k in finals[0]["model"])


def assert_nothing_left(cluster: SlurmCluster) -> None:
    assert cluster.active_jobs() == [], cluster.jobs()
    cluster.wait_for_no_job_pids(timeout=15)


def assert_survivor_kept_training(run_dir: Path, events: list[dict[str, Any]], victim: str, since: float) -> None:
    """The other replica was never restarted, and trained on between the failure and the victim's rejoin."""
    other = "1" if victim == "0" else "0"
    steps = steps_of(run_dir, other)
    assert all(s["attempt"] == 0 for s in steps)
    rejoin = next(e for e in events if e["event"] == "rejoined" and e["replica"] == victim and e["t"] > since)
    after = next(s for s in steps if s["t"] > since)
    assert after["t"] < rejoin["t"] or after.get("quorum_id") == rejoin["quorum_id"], (after, rejoin)


