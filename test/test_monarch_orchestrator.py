"""The Monarch orchestrator under real Monarch (torchmonarch), CPU, 2 replicas x 2 trainers.

Each job runs as a subprocess in its own session (the Monarch client);
afterwards every process the job reported (trainers, standby trainers,
the ReplicaActors and their trainer forkservers, the OrchestrationManager,
the LighthouseActor) must be gone.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from commands import REPO_ROOT, repo_env, run_bounded

pytest.importorskip("monarch.actor")
pytest.importorskip("torchft")

SCRIPT = REPO_ROOT / "test" / "scripts" / "supervised_steps.py"


def _env() -> dict[str, str]:
    return repo_env({"MONARCH_RUN_LOG_LEVEL": "WARNING"})


def _run(command: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    return run_bounded(command, timeout, _env())


def _events(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines() if line.strip()]


def _job_pids(run_dir: Path, events: list[dict[str, Any]]) -> set[int]:
    pids: set[int] = set()
    for e in events:
        if e["event"] in ("workers_started", "standby_ready"):
            pids.update(e["pids"])
        if e["event"] == "forkserver_ready":
            pids.add(e["pid"])
        if e["event"] == "orchestration_started":
            pids.update(p for p in (e["pid"], e.get("lighthouse_pid")) if p)
    for agent in (run_dir / "replicas").glob("*/agent.json"):
        pids.add(json.loads(agent.read_text())["pid"])
    return pids


def _assert_all_gone(pids: set[int]) -> None:
    alive = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode()
        except FileNotFoundError:
            continue
        if "python" in cmdline or "monarch" in cmdline:
            alive.append((pid, cmdline[:120]))
    assert not alive, f"processes left behind: {alive}"


@pytest.mark.timeout(360)
def test_kill_and_exception_restart_in_place_heal_and_rejoin(tmp_path: Path) -> None:
    """kill -9 then an exception in replica trainers, under the demo's default DiLoCo-20: restart in
    place, the other replica keeps committing outer syncs, the restarted one heals (inner and outer
    optimizer state) and rejoins; final parameters are bit-identical."""
    out = tmp_path / "demo"
    command = [sys.executable, "-m", "torch_monarch.demo", "--orchestrator", "monarch", "--replicas", "2", "--workers", "2", "--min-replicas", "1",
               "--duration", "24", "--every", "8", "--kinds", "kill,exc", "--no-baseline", "--status", "log", "--out", str(out)]
    result = _run(command, timeout=330)
    assert result.returncode == 0, result.stdout[-6000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["failures_injected"] == 2, summary
    assert summary["failures_recovered"] == 2, summary
    assert summary["final_params_identical"] is True
    assert summary["sync"] == "diloco every 20 steps", summary["sync"]
    assert summary["healthy_missed_syncs"] == 0, summary
    run_dir = out / "with_failures"
    events = _events(run_dir)
    failures = {f["kind"]: f for f in summary["failures"]}
    window = next(e["t"] for e in events if e["event"] == "window_start")
    detected = [e for e in events if e["event"] == "detected" and e.get("orchestrator") == "monarch"]
    assert [e["kind"] for e in detected][1:] == ["exception"], detected
    # The kill reached the victim's ReplicaActor as a signal, within the fast supervision poll; or,
    # when Monarch reported the killed trainer's peer first (its allreduce saw the link close), as
    # that peer's collective error naming the killed rank. Monarch 0.7 reports one trainer at a time,
    # in no fixed order, and the killed one may be reaped before its exit status can be read.
    kill = failures["kill"]
    if detected[0]["kind"] == "signal":
        assert detected[0]["signal"] == "SIGKILL", detected[0]
    else:
        assert detected[0]["kind"] == "collective" and detected[0]["failed_ranks"] == [kill["rank"]], detected[0]
    # The exception's traceback came with it, from the trainer's report_training_error.
    assert "InjectedFailure" in detected[1]["traceback"] and "train.py" in detected[1]["traceback"]
    for kind in ("kill", "exc"):
        f = failures[kind]
        victim = str(f["replica"])
        other = next(r for r in ("0", "1") if r != victim)
        # Restarted in place by its ReplicaActor (a new attempt, no replacement replica) ...
        assert any(e["event"] == "restart_scheduled" and e["replica"] == victim for e in events)
        assert not any(e["event"] == "replica_replacing" for e in events)
        # ... while the other replica went on: never restarted, and its next step after the injection
        # came before the victim was back, or (when the victim died just before an outer sync, which the
        # healthy replica then waited in) in the very quorum the victim rejoined at: no sync was lost.
        injected, rejoined = window + f["injected_s"], window + f["rejoined_s"]
        steps = [json.loads(line) for line in (run_dir / "replicas" / other / "steps.jsonl").read_text().splitlines()]
        assert all(s["attempt"] == 0 for s in steps), (kind, other)
        rejoin = next(e for e in events if e["event"] == "rejoined" and e["replica"] == victim and e["t"] >= injected)
        after = next(s for s in steps if s["t"] > injected)
        assert after["t"] < rejoined or after["quorum_id"] == rejoin["quorum_id"], (kind, f, after, rejoin)
    _assert_all_gone(_job_pids(run_dir, events))


@pytest.mark.timeout(240)
def test_exhausted_restarts_escalate_and_job_goes_on_with_min_replicas(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    command = [sys.executable, "-m", "torch_monarch.run", "--orchestrator", "monarch", "--replicas", "2", "--nproc-per-node", "2",
               "--min-replicas", "1", "--max-restarts", "1", "--restart-backoff", "0", "--replace-replicas", "0",
               "--status", "none", "--run-dir", str(run_dir), str(SCRIPT), "--steps", "300", "--step-time", "0.1", "--fail", "exc", "--fail-step", "3",
               "--fail-attempts", "always", "--fail-replica", "1"]
    result = _run(command, timeout=220)
    assert result.returncode == 0, result.stdout[-6000:]
    events = _events(run_dir)
    names = [(e["event"], e.get("replica")) for e in events]
    # Replica 1: one restart in place (the policy's budget), then escalated to the OrchestrationManager ...
    assert names.count(("restart_scheduled", "1")) == 1, names
    assert ("escalated", "1") in names
    escalation = json.loads((run_dir / "replicas" / "1" / "escalation.json").read_text())
    assert escalation["kind"] == "exception" and "planned failure in fail_here" in escalation["traceback"]
    assert escalation["escalated_by"] == ["replica 1"]
    # ... which, with no replacement allowed, went on with replica 0 (min_replicas=1), to the end.
    assert ("replica_dropped", "1") in names
    assert ("replica_succeeded", "0") in names
    assert ("restart_scheduled", "0") not in names
    _assert_all_gone(_job_pids(run_dir, events))


def _without_monarch(module: str, args: list[str]) -> subprocess.CompletedProcess[str]:
    code = f"import sys; sys.modules['monarch'] = None; import runpy; sys.argv = ['x', *{args!r}]; runpy.run_module({module!r}, run_name='__main__')"
    return subprocess.run([sys.executable, "-c", code], env=_env(), cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)


@pytest.mark.timeout(150)
def test_missing_torchmonarch_names_the_extra(tmp_path: Path) -> None:
    run = _without_monarch("torch_monarch.run", ["--orchestrator", "monarch", "--replicas", "2", "--run-dir", str(tmp_path / "r"), str(SCRIPT)])
    assert run.returncode == 2, run.stderr[-3000:]
    assert "pip install 'torch_monarch[monarch]'" in run.stderr
    demo = _without_monarch("torch_monarch.demo", ["--orchestrator", "monarch", "--out", str(tmp_path / "d")])
    assert demo.returncode == 2, demo.stderr[-3000:]
    assert "pip install 'torch_monarch[monarch]'" in demo.stderr
    assert not (tmp_path / "d" / "with_failures").exists()


@pytest.mark.timeout(60)
def test_dryrun_prints_the_monarch_plan(tmp_path: Path) -> None:
    result = _run([sys.executable, "-m", "torch_monarch.run", "--orchestrator", "monarch", "--replicas", "2", "--nproc-per-node", "3",
                   "--dryrun", "--run-dir", str(tmp_path), str(SCRIPT), "--steps", "5"], timeout=50)
    assert result.returncode == 0, result.stdout[-3000:]
    assert "OrchestrationManager" in result.stdout and "LighthouseActor" in result.stdout
    for rid in ("0", "1"):
        assert f"ReplicaActor {rid}: 3 x TrainerActor running {SCRIPT} --steps 5" in result.stdout
    assert "torch_monarch.run" not in result.stdout  # no replica agents: that is the embedded backend's plan
    assert not (tmp_path / "events.jsonl").exists()  # a dry run starts nothing


@pytest.mark.timeout(60)
def test_unknown_orchestrator_is_rejected() -> None:
    for module in ("torch_monarch.run", "torch_monarch.demo"):
        result = subprocess.run([sys.executable, "-m", module, "--orchestrator", "kubernetes", str(SCRIPT)], env=_env(), cwd=REPO_ROOT,
                                capture_output=True, text=True, timeout=50)
        assert result.returncode == 2
        assert "invalid choice: 'kubernetes'" in result.stderr
