"""LocalScheduler: replica agents as local processes; cancel ends exactly their process groups."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Callable

import pytest

from torch_monarch.supervision import LocalScheduler, ReplicaSpec, ReplicaState, RunDir
from torch_monarch.supervision.rundir import read_json

# Replica agents and workers are new interpreters: they must find torch_monarch.
pytestmark = [pytest.mark.timeout(120), pytest.mark.usefixtures("checkout_on_path")]

SLEEPER = "import time\nfrom torch_monarch import supervision\nsupervision.init_worker()\nsupervision.report_progress(0)\ntime.sleep(300)\n"
QUICK = "print('done')\n"


def wait_until(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.05)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def test_submit_status_succeeds(tmp_path: Path) -> None:
    script = tmp_path / "quick.py"
    script.write_text(QUICK)
    run_dir = RunDir(tmp_path / "run")
    sched = LocalScheduler(run_dir)
    spec = ReplicaSpec("0", ["--replica-id", "0", "--run-dir", str(run_dir.root), "--max-restarts", "0", str(script)])
    assert "torch_monarch.run" in sched.dryrun(spec)
    handle = sched.submit(spec)
    wait_until(lambda: sched.status(handle).state.terminal, 90, "the replica to finish")
    assert sched.status(handle).state is ReplicaState.SUCCEEDED
    assert (read_json(run_dir.agent_path("0")) or {}).get("state") == "succeeded"
    sched.close()


def test_cancel_stops_agent_and_its_workers(tmp_path: Path) -> None:
    script = tmp_path / "sleeper.py"
    script.write_text(SLEEPER)
    run_dir = RunDir(tmp_path / "run")
    sched = LocalScheduler(run_dir, grace_s=10)
    spec = ReplicaSpec("0", ["--replica-id", "0", "--run-dir", str(run_dir.root), str(script)], nproc_per_node=2)
    handle = sched.submit(spec)
    agent_pid = sched.pid(handle)

    def worker_pids() -> list[int]:
        workers = (read_json(run_dir.agent_path("0")) or {}).get("workers") or {}
        return list(workers.values())

    wait_until(lambda: len(worker_pids()) == 2 and all(run_dir.worker_path("0", r).exists() for r in range(2)), 90, "workers")
    pids = worker_pids()
    assert all(alive(p) for p in pids)
    sched.cancel(handle)
    assert sched.status(handle).state is ReplicaState.CANCELLED
    assert not alive(agent_pid)
    wait_until(lambda: not any(alive(p) for p in pids), 15, "the workers to be gone")
    sched.close()


def test_failed_replica_reports_escalated_failure(tmp_path: Path) -> None:
    script = tmp_path / "fails.py"
    script.write_text(
        "from torch_monarch import supervision\n@supervision.supervised\ndef main():\n    raise RuntimeError('always')\nmain()\n"
    )
    run_dir = RunDir(tmp_path / "run")
    sched = LocalScheduler(run_dir)
    spec = ReplicaSpec(
        "1",
        ["--replica-id", "1", "--run-dir", str(run_dir.root), "--max-restarts", "1", "--restart-backoff", "0", str(script)],
    )
    handle = sched.submit(spec)
    wait_until(lambda: sched.status(handle).state.terminal, 90, "the replica to give up")
    status = sched.status(handle)
    assert status.state is ReplicaState.FAILED
    assert status.failure is not None
    assert status.failure.kind.value == "exception"
    assert "RuntimeError: always" in status.failure.message
    assert "raise RuntimeError('always')" in status.failure.traceback
    assert status.failure.replica_id == "1"
    sched.close()
