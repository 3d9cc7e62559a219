"""``monarch-run --scheduler slurm`` on a live SLURM cluster, through TorchX 0.7.0's SLURM scheduler.

The cluster (``test/support/slurm_cluster.py``) runs on this machine: three
``slurmd`` nodes on loopback. Two replicas of the demo's trainer run as two
SLURM jobs; the drills:

* a worker is killed: its replica restarts it in place (same SLURM job),
  the other replica keeps training, the restarted one heals and rejoins;
* a worker is killed with no restarts left: the replica escalates and the
  orchestrator replaces it with a new SLURM job, which heals and rejoins;
* a replica's job is cancelled (``scancel``): the orchestrator sees it and
  replaces it with a new SLURM job.

Each waits for the recovery, then stops both replicas at the same step: their
final parameters are identical, and no SLURM job or job process is left.
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

pytest.importorskip("torchx")

from slurm_cluster import SlurmCluster, slurm_cluster  # noqa: E402,F401 - the fixture

from torch_monarch.launch.status_view import replica_rows  # noqa: E402
from torch_monarch.supervision.rundir import RunDir, write_json  # noqa: E402

TRAIN = REPO_ROOT / "torch_monarch" / "demo" / "train.py"
BOUND_S = 200  # each drill's bound: from monarch-run's start to its exit


class _Run:
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
def run(tmp_path: Path) -> Iterator[Callable[..., _Run]]:
    runs: list[_Run] = []

    def start(*argv: str) -> _Run:
        runs.append(_Run(tmp_path, *argv))
        return runs[-1]

    yield start
    for r in runs:
        r.kill()  # a failed test's monarch-run; the cluster cancels its jobs


def _steps(run_dir: Path, replica: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "replicas" / replica / "steps.jsonl").read_text().splitlines()]


def _jobs(events: list[dict[str, Any]]) -> dict[str, list[str]]:
    """Each replica's SLURM job ids, in submission order."""
    jobs: dict[str, list[str]] = {}
    for e in events:
        if e["event"] == "replica_submitted":
            assert e["scheduler"] == "slurm" and e["handle"].startswith("slurm://"), e
            jobs.setdefault(e["replica"], []).append(e["handle"].rsplit("/", 1)[1])
    return jobs


def _assert_identical_finals(run_dir: Path) -> None:
    finals = [torch.load(run_dir / "final" / f"replica_{r}_rank_0.pt") for r in ("0", "1")]
    assert finals[0]["step"] == finals[1]["step"]
    assert all(torch.equal(finals[0]["model"][k], finals[1]["model"][k]) for k in finals[0]["model"])


def _assert_nothing_left(cluster: SlurmCluster) -> None:
    assert cluster.active_jobs() == [], cluster.jobs()
    assert cluster.job_step_pids() == []


def _assert_survivor_kept_training(run_dir: Path, events: list[dict[str, Any]], victim: str, since: float) -> None:
    """The other replica was never restarted, and trained on between the failure and the victim's rejoin."""
    other = "1" if victim == "0" else "0"
    steps = _steps(run_dir, other)
    assert all(s["attempt"] == 0 for s in steps)
    rejoin = next(e for e in events if e["event"] == "rejoined" and e["replica"] == victim and e["t"] > since)
    after = next(s for s in steps if s["t"] > since)
    assert after["t"] < rejoin["t"] or after.get("quorum_id") == rejoin["quorum_id"], (after, rejoin)


def _assert_replaced_and_healed(
    cluster: SlurmCluster, run_dir: Path, events: list[dict[str, Any]], victim: str, first_state: str, kind: str
) -> None:
    jobs = _jobs(events)
    other = "1" if victim == "0" else "0"
    assert len(jobs[victim]) == 2 and len(jobs[other]) == 1, jobs
    first, replacement = (cluster.accounting(j)[0] for j in jobs[victim])
    # The replaced allocation ended as SLURM says; the replacement is a new SLURM job that ran to the end.
    assert first["state"].split()[0] == first_state, first
    assert replacement["state"] == "COMPLETED" and cluster.accounting(jobs[other][0])[0]["state"] == "COMPLETED"
    (replacing,) = [e for e in events if e["event"] == "replica_replacing"]
    assert replacing["replica"] == victim and replacing["kind"] == kind, replacing
    healed = [e for e in events if e["event"] == "healed" and e["replica"] == victim and e["t"] > replacing["t"]]
    assert healed, "the replacement never healed from the survivor"
    _assert_survivor_kept_training(run_dir, events, victim, replacing["t"])


@pytest.mark.timeout(BOUND_S + 30)
def test_killed_worker_restarts_in_place_in_its_slurm_job(slurm_cluster: SlurmCluster, run: Callable[..., _Run]) -> None:
    job = run("--inject-failures", "every=2s,kinds=kill,count=1,seed=0")
    job.wait_for(lambda: any(e["event"] == "inject" for e in job.events()), "injected kill")
    (inject,) = [e for e in job.events() if e["event"] == "inject"]
    victim = inject["replica"]
    job.wait_for(lambda: job.rejoined_after(victim, inject["t"]), f"replica {victim} back in the quorum")
    job.stop_and_finish()
    events = job.events()
    after = [e["event"] for e in events if e["t"] >= inject["t"] and str(e.get("replica")) == victim]
    for name in ("detected", "restart_scheduled", "workers_started", "healed", "rejoined"):
        assert name in after, after
    detected = next(e for e in events if e["event"] == "detected" and e["t"] >= inject["t"])
    assert detected["kind"] == "signal" and detected["signal"] == "SIGKILL"
    # Restarted in place: one SLURM job per replica, both completed, on nodes of their own.
    jobs = _jobs(events)
    assert sorted(jobs) == ["0", "1"] and all(len(ids) == 1 for ids in jobs.values()), jobs
    rows = [slurm_cluster.accounting(ids[0])[0] for ids in jobs.values()]
    assert [r["state"] for r in rows] == ["COMPLETED", "COMPLETED"], rows
    assert rows[0]["nodes"] != rows[1]["nodes"], rows
    assert not any(e["event"] == "replica_replacing" for e in events)
    _assert_survivor_kept_training(job.run_dir, events, victim, inject["t"])
    _assert_identical_finals(job.run_dir)
    _assert_nothing_left(slurm_cluster)


@pytest.mark.timeout(BOUND_S + 30)
def test_escalated_replica_is_replaced_by_a_new_slurm_job(slurm_cluster: SlurmCluster, run: Callable[..., _Run]) -> None:
    # No restart in place: the killed worker's replica escalates at once.
    job = run("--max-restarts", "0", "--replace-replicas", "1", "--inject-failures", "every=2s,kinds=kill,count=1,seed=0")
    job.wait_for(lambda: any(e["event"] == "replica_replacing" for e in job.events()), "a replacement")
    (replacing,) = [e for e in job.events() if e["event"] == "replica_replacing"]
    job.wait_for(lambda: job.rejoined_after(replacing["replica"], replacing["t"]), "the replacement in the quorum")
    job.stop_and_finish()
    events = job.events()
    # The orchestrator read the escalated failure (a SIGKILL) from the run dir the nodes share.
    _assert_replaced_and_healed(slurm_cluster, job.run_dir, events, replacing["replica"], "FAILED", kind="signal")
    assert not any(e["event"] == "restart_scheduled" for e in events)
    _assert_identical_finals(job.run_dir)
    _assert_nothing_left(slurm_cluster)


@pytest.mark.timeout(BOUND_S + 30)
def test_scancel_of_a_replica_is_a_failure_the_orchestrator_replaces(
    slurm_cluster: SlurmCluster, run: Callable[..., _Run]
) -> None:
    job = run("--replace-replicas", "1")
    job.wait_for(job.both_training_together, "both replicas training in one quorum")
    slurm_cluster.run("scancel", _jobs(job.events())["1"][0])
    job.wait_for(lambda: any(e["event"] == "replica_replacing" for e in job.events()), "a replacement")
    (replacing,) = [e for e in job.events() if e["event"] == "replica_replacing"]
    job.wait_for(lambda: job.rejoined_after("1", replacing["t"]), "the replacement in the quorum")
    job.stop_and_finish()
    _assert_replaced_and_healed(slurm_cluster, job.run_dir, job.events(), "1", "CANCELLED", kind="exit_code")
    _assert_identical_finals(job.run_dir)
    _assert_nothing_left(slurm_cluster)
