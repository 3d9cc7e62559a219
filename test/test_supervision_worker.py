"""The worker side of supervision and the hang probe, with real processes where it matters."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Callable, Iterator

import pytest

from commands import repo_env
from torch_monarch.errors import PeerFailureError
from torch_monarch.supervision import Backoff, FailureKind, HangConfig, HangProbe, RestartPolicy, RunDir
from torch_monarch.supervision import worker as sv
from torch_monarch.supervision.probes import process_state
from torch_monarch.supervision.replica_supervisor import ReplicaSupervisor
from torch_monarch.supervision.rundir import read_jsonl, write_json

pytestmark = pytest.mark.timeout(60)



def wait_until(predicate: Callable[[], bool], timeout: float = 10.0, what: str = "condition") -> None:
    """Polls ``predicate`` until it holds (a bounded wait for an observable state, not a sleep)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.01)


@pytest.fixture
def worker_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[RunDir]:
    """A supervised worker's environment in this process (replica 3, rank 1)."""
    run_dir = RunDir(tmp_path / "run")
    monkeypatch.setenv("MONARCH_RUN_DIR", str(run_dir.root))
    monkeypatch.setenv("MONARCH_REPLICA_ID", "3")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(tmp_path / "error.json"))
    monkeypatch.delenv("MONARCH_SUPERVISOR_PID", raising=False)
    monkeypatch.setattr(sv, "_state", sv._State())
    yield run_dir


def _raise_peer_failure() -> None:
    raise PeerFailureError("allreduce (sequence number 7) failed: lost rank 0", failed_ranks=[0])


def test_report_training_error_writes_traceback_kind_and_ranks(worker_env: RunDir, tmp_path: Path) -> None:
    sv.init_worker()
    try:
        _raise_peer_failure()
    except PeerFailureError:
        sv.report_training_error()
    report = json.loads((tmp_path / "error.json").read_text())
    assert report["monarch"]["kind"] == "collective"
    assert report["monarch"]["failed_ranks"] == [0]
    assert "_raise_peer_failure" in report["monarch"]["traceback"]
    # torch.distributed.elastic's fields, so its ProcessFailure can read the file too
    assert "_raise_peer_failure" in report["message"]["extraInfo"]["py_callstack"]
    events = [e["event"] for e in worker_env.events()]
    assert events == ["worker_started", "worker_error"]


def test_progress_status_and_exception_drill(worker_env: RunDir) -> None:
    sv.report_progress(5, loss=1.5)
    status = json.loads(worker_env.worker_path("3", 1).read_text())
    assert (status["step"], status["state"], status["loss"], status["pid"]) == (5, "training", 1.5, os.getpid())
    write_json(worker_env.drill_path("3", 1), {"id": 0, "kind": "exc"})
    with pytest.raises(sv.InjectedFailure):
        sv.report_progress(6)
    assert not worker_env.drill_path("3", 1).exists()
    sv.report_progress(7)  # taken once only


def test_stop_and_start_control(worker_env: RunDir, monkeypatch: pytest.MonkeyPatch) -> None:
    assert not sv.stop_requested(100)
    write_json(worker_env.control_path, {"start": True, "stop_at_step": 10})
    assert not sv.stop_requested(9) and sv.stop_requested(10)
    monkeypatch.setenv("MONARCH_START_BARRIER", "1")
    sv.wait_for_start(timeout=timedelta(seconds=5))  # start already given


def test_supervised_reports_and_exits_nonzero(tmp_path: Path) -> None:
    script = tmp_path / "boom.py"
    script.write_text(
        "from torch_monarch import supervision\n"
        "@supervision.supervised\n"
        "def main():\n"
        "    def deep():\n"
        "        raise KeyError('missing')\n"
        "    deep()\n"
        "main()\n"
    )
    env = repo_env({"TORCHELASTIC_ERROR_FILE": str(tmp_path / "err.json"), "MONARCH_RUN_DIR": str(tmp_path / "run")})
    proc = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1, proc.stderr
    report = json.loads((tmp_path / "err.json").read_text())
    assert report["monarch"]["kind"] == FailureKind.EXCEPTION.value
    assert "in deep" in report["monarch"]["traceback"] and "KeyError" in report["monarch"]["traceback"]


def test_hang_probe_sees_a_stopped_process(tmp_path: Path) -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        probe = HangProbe(HangConfig(stopped_grace=timedelta(0)), None, "0")
        assert probe.check({0: child.pid}) == []
        os.kill(child.pid, signal.SIGSTOP)
        wait_until(lambda: process_state(child.pid) == "T", what="the child to stop")
        hung = probe.check({0: child.pid})
        assert len(hung) == 1 and hung[0].pid == child.pid and hung[0].signal == "SIGSTOP"
    finally:
        child.kill()
        child.wait()


def test_hang_probe_progress_timeout(tmp_path: Path) -> None:
    run_dir = RunDir(tmp_path)
    wall = [1000.0]
    probe = HangProbe(HangConfig(progress_timeout=timedelta(seconds=5)), run_dir, "0", wall_clock=lambda: wall[0])
    pid = os.getpid()  # a running process: only the progress signal can fire
    write_json(run_dir.worker_path("0", 0), {"pid": pid, "state": "training", "t": 1000.0, "step": 3})
    assert probe.check({0: pid}) == []
    wall[0] = 1006.0
    hung = probe.check({0: pid})
    assert len(hung) == 1 and "no progress" in hung[0].reason
    write_json(run_dir.worker_path("0", 0), {"pid": pid, "state": "syncing", "t": 1000.0, "step": 3})
    assert probe.check({0: pid}) == []  # waiting for other replicas is not a hang


def test_a_restart_that_reached_training_is_not_backed_off(tmp_path: Path) -> None:
    run_dir = RunDir(tmp_path)
    policy = RestartPolicy(max_restarts=5, backoff=Backoff(initial=0.5))
    supervisor = ReplicaSupervisor("0", policy, run_dir, hang=HangConfig(enabled=False))
    pid = os.getpid()

    def fail_attempt(state: str) -> float:
        supervisor.start_attempt()
        write_json(run_dir.worker_path("0", 0), {"pid": pid, "state": state, "t": time.time(), "step": 1})
        supervisor.kill_hung({0: pid})  # the per-tick check: nothing is hung, the state is noted
        assert supervisor.supervise(supervisor.replica_failure("worker failed"))
        return supervisor.last_delay

    assert fail_attempt("training") == 0.0  # a one-off failure
    assert fail_attempt("ready") == 0.5  # the restart failed before training: a crash loop backs off
    assert fail_attempt("ready") == 1.0
    assert fail_attempt("training") == 0.0  # that restart trained: this failure is a new one
    assert fail_attempt("training") == 0.0


def test_jsonl_append_and_incremental_read(tmp_path: Path) -> None:
    run_dir = RunDir(tmp_path)
    run_dir.event("a", x=1)
    records, offset = read_jsonl(run_dir.events_path)
    run_dir.event("b")
    more, _ = read_jsonl(run_dir.events_path, offset)
    assert [r["event"] for r in records] == ["a"] and [r["event"] for r in more] == ["b"]
