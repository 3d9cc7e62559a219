"""Supervision building blocks, in process: Failure, RestartPolicy, the tree, the orchestrator."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Optional

import pytest

from torch_monarch._env import with_env_overrides
from torch_monarch.demo.config import DemoConfig
from torch_monarch.launch.inject import InjectionSpec
from torch_monarch.quorum.lighthouse import LighthouseConfig
from torch_monarch.quorum.manager import QuorumConfig
from torch_monarch.supervision import (
    Backoff,
    Failure,
    FailureKind,
    Orchestrator,
    ReplicaSpec,
    ReplicaState,
    RestartBudget,
    RestartPolicy,
    Scheduler,
    Supervisor,
    root_cause,
)
from torch_monarch.supervision.drills import DRILL_KINDS
from torch_monarch.supervision.probes import HangConfig
from torch_monarch.supervision.replica_supervisor import ReplicaSupervisor
from torch_monarch.supervision.rundir import AgentRecord, ControlRecord, DrillCommand, RunDir, WorkerRecord
from torch_monarch.supervision.states import SupervisorState
from torch_monarch.supervision.scheduler.base import ReplicaStatus

pytestmark = pytest.mark.timeout(30)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


# -- Failure ------------------------------------------------------------------


def test_failure_from_signal_keeps_faulthandler_dump() -> None:
    stderr = "some log line\nFatal Python error: Segmentation fault\n\nCurrent thread 0x1 (most recent call first):\n  File \"train.py\", line 3 in step\n"
    f = Failure.from_exit(who="replica 0 / rank 1", exitcode=-11, replica_id="0", rank=1, pid=42, stderr_tail=stderr)
    assert f.kind is FailureKind.SIGNAL
    assert f.signal == "SIGSEGV"
    assert f.traceback.startswith("Fatal Python error: Segmentation fault")
    assert 'File "train.py", line 3 in step' in f.traceback
    assert "signal SIGSEGV" in f.describe()


def test_failure_from_worker_report() -> None:
    report = {
        "message": {"message": "PeerFailureError: lost rank 2", "extraInfo": {"py_callstack": "tb", "timestamp": "1"}},
        "monarch": {
            "kind": "collective",
            "time": 123.5,
            "message": "PeerFailureError: lost rank 2",
            "traceback": "Traceback ...\nPeerFailureError: lost rank 2\n",
            "error_type": "PeerFailureError",
            "failed_ranks": [2],
        },
    }
    f = Failure.from_exit(who="w", exitcode=1, report=report)
    assert f.kind is FailureKind.COLLECTIVE
    assert f.failed_ranks == (2,)
    assert f.time == 123.5
    assert f.error_type == "PeerFailureError"
    assert "Traceback" in f.traceback


def test_failure_from_elastic_record_file() -> None:
    report = {"message": {"message": "ValueError: x", "extraInfo": {"py_callstack": "Traceback: ...", "timestamp": "77"}}}
    f = Failure.from_exit(who="w", exitcode=1, report=report)
    assert f.kind is FailureKind.EXCEPTION
    assert f.traceback == "Traceback: ..."
    assert f.time == 77.0


def test_failure_plain_exit_code() -> None:
    f = Failure.from_exit(who="w", exitcode=3, stderr_tail="a\nb\n")
    assert f.kind is FailureKind.EXIT_CODE
    assert f.exitcode == 3
    assert "exit code 3" in f.describe()


def test_root_cause_prefers_crash_over_its_consequences() -> None:
    crash = Failure(who="r1", kind=FailureKind.SIGNAL, time=10.0, message="SIGKILL")
    peer = Failure(who="r0", kind=FailureKind.COLLECTIVE, time=9.9, message="lost rank 1", failed_ranks=(1,))
    root = root_cause([peer, crash])
    assert root.who == "r1"
    assert [r.who for r in root.related] == ["r0"]


def test_failure_json_round_trip_and_escalation() -> None:
    f = Failure(who="r", kind=FailureKind.HANG, time=1.0, message="stopped", failed_ranks=(3,))
    f = f.escalated("replica 0").escalated("orchestrator")
    back = Failure.from_json(json.loads(f.dumps()))
    assert back == f
    assert back.escalated_by == ("replica 0", "orchestrator")


# -- RestartPolicy -------------------------------------------------------------


def test_restart_budget_window_and_backoff() -> None:
    clock = FakeClock()
    budget = RestartBudget(RestartPolicy(max_restarts=2, window=timedelta(seconds=60), backoff=Backoff(1.0, 2.0, 3.0)), clock)
    assert budget.request() == timedelta(0)  # a one-off failure restarts at once
    assert budget.request() == timedelta(seconds=1)
    assert budget.request() is None  # third within the window: escalate
    clock.now += 61
    assert budget.request() == timedelta(0)  # the window moved on
    assert budget.total == 3


def test_backoff_grows_only_while_restarts_fail_before_training() -> None:
    clock = FakeClock()
    budget = RestartBudget(RestartPolicy(max_restarts=5, window=timedelta(seconds=60), backoff=Backoff(1.0, 2.0, 8.0)), clock)
    assert budget.request() == timedelta(0)
    assert budget.request() == timedelta(seconds=1)  # the restart crashed before training: a loop
    assert budget.request() == timedelta(seconds=2)
    budget.trained()  # the third restart got back to training
    assert budget.request() == timedelta(0)  # a new failure, restarted at once
    assert budget.request() == timedelta(seconds=1)
    assert budget.request() is None  # the window's cap counts every restart, trained or not


def test_backoff_doubles_from_the_second_restart_up_to_its_cap() -> None:
    backoff = Backoff(initial=0.5, factor=2.0, max=3.0)
    assert [backoff.delay(n).total_seconds() for n in range(5)] == [0.0, 0.5, 1.0, 2.0, 3.0]


def test_restart_policy_backoff_float_and_env(monkeypatch: pytest.MonkeyPatch) -> None:
    assert RestartPolicy(backoff=0.25).backoff.initial == timedelta(seconds=0.25)
    assert RestartPolicy(backoff=timedelta(seconds=2)).backoff.initial == timedelta(seconds=2)
    assert RestartPolicy(window=90).window == timedelta(seconds=90)
    monkeypatch.setenv("MONARCH_MAX_RESTARTS", "7")
    monkeypatch.setenv("MONARCH_RESTART_WINDOW", "12.5")
    monkeypatch.setenv("MONARCH_RESTART_BACKOFF", "0.1")
    p = RestartPolicy().with_env_overrides()
    assert (p.max_restarts, p.window, p.backoff.initial) == (7, timedelta(seconds=12.5), timedelta(seconds=0.1))


def test_a_duration_must_be_a_timedelta_or_seconds() -> None:
    with pytest.raises(TypeError, match="RestartPolicy.window: a duration must be a timedelta or a number of seconds"):
        RestartPolicy(window="60")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="RestartPolicy.backoff: a duration must be"):
        RestartPolicy(backoff="fast")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="window must be positive"):
        RestartPolicy(window=0)


def test_env_overrides_parse_by_field_type() -> None:
    @dataclass(frozen=True)
    class Cfg:
        a: int = 1
        b: float = 1.0
        c: bool = False
        d: str = "x"

    cfg = with_env_overrides(Cfg(), "T_", {"T_A": "3", "T_B": "2.5", "T_C": "yes", "T_D": "y"})
    assert cfg == Cfg(3, 2.5, True, "y")
    with pytest.raises(ValueError, match="T_A"):
        with_env_overrides(Cfg(), "T_", {"T_A": "nope"})


def test_duration_fields_are_overridden_in_seconds() -> None:
    env = {
        "MONARCH_HANG_PROGRESS_TIMEOUT": "7.5",
        "MONARCH_QUORUM_HEARTBEAT_INTERVAL": "0.25",
        "MONARCH_LIGHTHOUSE_HEARTBEAT_TIMEOUT": "2",
    }
    assert with_env_overrides(HangConfig(), HangConfig.ENV_PREFIX, env).progress_timeout == timedelta(seconds=7.5)
    assert with_env_overrides(QuorumConfig(), QuorumConfig.ENV_PREFIX, env).heartbeat_interval == timedelta(seconds=0.25)
    assert with_env_overrides(LighthouseConfig(), LighthouseConfig.ENV_PREFIX, env).heartbeat_timeout == timedelta(seconds=2)
    with pytest.raises(ValueError, match="MONARCH_HANG_STOPPED_GRACE"):
        with_env_overrides(HangConfig(), HangConfig.ENV_PREFIX, {"MONARCH_HANG_STOPPED_GRACE": "1s"})


def test_config_to_env_round_trips_through_the_overrides() -> None:
    cfg = DemoConfig(pg_timeout=timedelta(seconds=1800, microseconds=500), lr=0.5, backend="gloo")
    assert cfg.to_env()["MONARCH_DEMO_PG_TIMEOUT"] == "1800.0005"
    assert with_env_overrides(DemoConfig(), DemoConfig.ENV_PREFIX, cfg.to_env()) == cfg


# -- the tree ------------------------------------------------------------------


class Recording(Supervisor):
    def __init__(self, name: str, answer: bool, parent: Optional[Supervisor] = None) -> None:
        super().__init__(name, parent)
        self.answer = answer
        self.seen: list[Failure] = []

    def supervise(self, failure: Failure) -> bool:
        self.seen.append(failure)
        return self.answer


def test_handle_escalates_until_someone_handles() -> None:
    root = Recording("root", True)
    middle = Recording("middle", False, parent=root)
    f = Failure(who="w", kind=FailureKind.EXCEPTION, time=0.0, message="boom")
    assert middle.handle(f)
    assert root.seen[0].escalated_by == ("middle",)
    assert not Recording("lonely", False).handle(f)


def test_replica_supervisor_restarts_then_escalates() -> None:
    clock = FakeClock()
    parent = Recording("orchestrator", True)
    sup = ReplicaSupervisor("0", RestartPolicy(max_restarts=1, window=100, backoff=0.5), parent=parent, clock=clock)
    f = Failure(who="w", kind=FailureKind.SIGNAL, time=0.0, message="SIGKILL", replica_id="0")
    assert sup.supervise(f) and sup.last_delay == 0.0  # the first restart is immediate
    assert not sup.supervise(f)
    assert sup.handle(f)  # declined here, handled by the parent
    assert parent.seen and parent.seen[0].escalated_by == ("replica 0",)


class FakeScheduler(Scheduler):
    name = "fake"

    def __init__(self) -> None:
        self.states: dict[str, ReplicaState] = {}
        self.submitted: list[str] = []
        self.cancelled: list[str] = []

    def submit(self, spec: ReplicaSpec) -> str:
        handle = f"{spec.replica_id}/{len(self.submitted)}"
        self.submitted.append(handle)
        self.states[handle] = ReplicaState.RUNNING
        return handle

    def status(self, handle: str) -> ReplicaStatus:
        return ReplicaStatus(self.states[handle], exitcode=3 if self.states[handle] is ReplicaState.FAILED else None)

    def cancel(self, handle: str) -> None:
        self.cancelled.append(handle)
        self.states[handle] = ReplicaState.CANCELLED

    def dryrun(self, spec: ReplicaSpec) -> str:
        return f"run {spec.replica_id}"


def test_orchestrator_replaces_then_drops_then_fails() -> None:
    sched = FakeScheduler()
    specs = [ReplicaSpec(str(i), ["train.py"]) for i in range(3)]
    orch = Orchestrator(sched, specs, min_replicas=2, replace_policy=RestartPolicy(max_restarts=1, window=100, backoff=0))
    orch.start()
    assert len(sched.submitted) == 3 and orch.poll()

    sched.states[orch.replicas["0"].handle] = ReplicaState.FAILED  # escalated: replaced by a new allocation
    assert orch.poll()
    assert orch.replicas["0"].allocations == 2 and len(sched.submitted) == 4

    sched.states[orch.replicas["0"].handle] = ReplicaState.FAILED  # again: no replacement left, 2 remain >= min
    assert orch.poll()
    assert orch.replicas["0"].dropped and orch.healthy_replicas() == 2

    sched.states[orch.replicas["1"].handle] = ReplicaState.FAILED  # replaced once
    assert orch.poll()
    sched.states[orch.replicas["1"].handle] = ReplicaState.FAILED  # 1 would remain < min 2: the job fails
    assert not orch.poll()
    assert orch.fatal is not None and orch.fatal.replica_id == "1"
    assert not orch.succeeded
    orch.stop()
    assert orch.replicas["2"].handle in sched.cancelled


def test_orchestrator_succeeds_when_all_replicas_finish() -> None:
    sched = FakeScheduler()
    orch = Orchestrator(sched, [ReplicaSpec(str(i), []) for i in range(2)], min_replicas=1)
    orch.start()
    for record in orch.replicas.values():
        sched.states[record.handle] = ReplicaState.SUCCEEDED
    assert not orch.poll()
    assert orch.succeeded


class EscalationReadingScheduler(FakeScheduler):
    """Reports a failed allocation with the escalation record its replica wrote, like the real schedulers."""

    def __init__(self, run_dir: RunDir) -> None:
        super().__init__()
        self.run_dir = run_dir

    def status(self, handle: str) -> ReplicaStatus:
        status = super().status(handle)
        if status.state is ReplicaState.FAILED:
            status.failure = self.run_dir.read_escalation(handle.split("/")[0])
        return status


def test_a_replica_escalation_is_marked_once_by_the_replica_supervisor(tmp_path: Path) -> None:
    run_dir = RunDir(tmp_path)
    sup = ReplicaSupervisor("0", RestartPolicy(max_restarts=0, window=100), run_dir)
    crash = Failure(who="replica 0 / rank 1", kind=FailureKind.SIGNAL, time=1.0, message="SIGKILL", replica_id="0")
    assert not sup.supervise(crash)
    sup.escalate(crash, {0: 101, 1: 102})
    assert json.loads(run_dir.escalation_path("0").read_text())["escalated_by"] == ["replica 0"]
    agent = run_dir.read_agent("0")
    assert agent is not None and agent.state is SupervisorState.ESCALATED and agent.workers == {0: 101, 1: 102}
    assert agent.failure == crash.describe()

    sched = EscalationReadingScheduler(run_dir)
    orch = Orchestrator(sched, [ReplicaSpec("0", [])], min_replicas=1, replace_policy=RestartPolicy(max_restarts=0, window=100))
    orch.start()
    sched.states[orch.replicas["0"].handle] = ReplicaState.FAILED
    assert not orch.poll()
    assert orch.fatal is not None and orch.fatal.escalated_by == ("replica 0",)
    assert orch.fatal.message == "SIGKILL"


def test_run_dir_records_round_trip_through_their_files(tmp_path: Path) -> None:
    run_dir = RunDir(tmp_path)
    assert run_dir.read_agent("0") is None and run_dir.read_worker("0", 0) is None
    agent = AgentRecord("0", pid=7, state=SupervisorState.RESTARTING, restarts=2, workers={0: 11}, t=3.0, delay_s=0.5)
    run_dir.write_agent(agent)
    assert run_dir.read_agent("0") == agent
    assert json.loads(run_dir.agent_path("0").read_text())["workers"] == {"0": 11}  # JSON keys are strings
    worker = WorkerRecord(pid=11, replica_id="0", rank=0, attempt=1, state="training", started=1.0, t=2.0, step=5,
                          fields={"loss": 2.5, "quorum_id": 3, "participants": 2})
    run_dir.write_worker(worker)
    back = run_dir.read_worker("0", 0)
    assert back == worker and back.loss == 2.5 and back.quorum_id == 3 and back.participants == 2
    assert run_dir.read_control() == ControlRecord()
    run_dir.write_control(ControlRecord(start=True, stop_at_step=40))
    assert run_dir.read_control() == ControlRecord(start=True, stop_at_step=40)
    run_dir.write_drill("0", 1, DrillCommand(4, "exc", 9.0))
    assert run_dir.take_drill("0", 1) == DrillCommand(4, "exc", 9.0)
    assert run_dir.take_drill("0", 1) is None  # a drill runs once


def test_every_drill_kind_is_injectable_and_one_is_unknown() -> None:
    assert InjectionSpec(kinds=DRILL_KINDS).kinds == DRILL_KINDS
    with pytest.raises(ValueError, match="choose from kill, segv, hang, comm, exc, exit, cuda"):
        InjectionSpec(kinds=("kill", "flood"))


# -- drills ------------------------------------------------------------------


def test_injection_spec_parse_and_schedule() -> None:
    spec = InjectionSpec.parse("every=20s,kinds=kill,segv,hang,comm,seed=1")
    assert spec.every == timedelta(seconds=20) and spec.kinds == ("kill", "segv", "hang", "comm") and spec.seed == 1
    assert InjectionSpec.parse("every=500ms,kinds=exc,count=3").schedule() == [0.5, 1.0, 1.5]
    assert InjectionSpec(every=20, until=timedelta(seconds=100)).schedule() == [20, 40, 60, 80, 100]
    assert InjectionSpec.parse("every=1m,start=10s,until=2m").schedule() == [10, 70]
    with pytest.raises(ValueError):
        InjectionSpec.parse("every=20s,kinds=meteor")
    with pytest.raises(ValueError):
        InjectionSpec.parse("often")
