"""The run directory: how the processes of one job talk about their state.

Supervisors and workers of a job share a directory (``MONARCH_RUN_DIR``).
Each file holds one record type below, whose docstring is its schema:

``events.jsonl``
    append-only timeline of the job, one JSON object per line with ``t``
    (``time.time()``), ``event`` (a name from
    :class:`~torch_monarch.supervision.events.Event`, which lists each
    event's fields) and those fields; small appends with O_APPEND do not
    interleave between processes.
``replicas/<id>/agent.json``
    :class:`AgentRecord`: the replica supervisor's state.
``replicas/<id>/rank<r>.json``
    :class:`WorkerRecord`: each worker's last progress report; also its
    heartbeat for the hang probe.
``replicas/<id>/steps.jsonl``
    :class:`StepRecord` lines: one per committed step from the replica's
    rank 0 (the loss curve).
``replicas/<id>/drill/rank<r>.json``
    :class:`DrillCommand`: a failure drill for that worker to run
    (``--inject-failures``); the worker deletes it when it takes it.
``replicas/<id>/escalation.json``
    the :class:`~torch_monarch.supervision.failure.Failure` (``to_json()``)
    the replica supervisor escalated, marked by it in ``escalated_by``; every
    scheduler reads it for the orchestrator (the directory is on the
    submitting host, or on a file system the cluster's nodes share). A new
    allocation of the replica starts without it.
``replicas/<id>/logs/``
    the per-attempt worker logs (stdout, stderr, error.json).
``control.json``
    :class:`ControlRecord`: job-wide requests to the workers.

A local file tree is what the local scheduler needs; a cluster job keeps it
on a shared file system (or only the local parts of it).
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Iterator, Mapping, Optional, Union

from torch_monarch.supervision.events import Event
from torch_monarch.supervision.failure import Failure
from torch_monarch.supervision.states import SupervisorState

__all__ = [
    "AgentRecord",
    "ControlRecord",
    "DrillCommand",
    "RunDir",
    "StepRecord",
    "WorkerRecord",
    "append_jsonl",
    "read_json",
    "read_jsonl",
    "write_json",
]

PathLike = Union[str, "os.PathLike[str]"]


def write_json(path: PathLike, data: Any) -> None:
    """Writes ``data`` atomically (readers see the old or the new file, never half)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(data, f)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def read_json(path: PathLike) -> Optional[Any]:
    """The JSON in ``path``, or None when it does not exist (yet) or is unreadable."""
    try:
        with open(path) as f:
            return json.load(f)
    except (FileNotFoundError, json.JSONDecodeError, IsADirectoryError):
        return None


def append_jsonl(path: PathLike, record: Any) -> None:
    """Appends one JSON line with a single O_APPEND write."""
    line = (json.dumps(record, separators=(",", ":")) + "\n").encode()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def read_jsonl(path: PathLike, offset: int = 0) -> tuple[list[Any], int]:
    """Complete lines of ``path`` from byte ``offset``; returns (records, new offset)."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read()
    except FileNotFoundError:
        return [], offset
    end = data.rfind(b"\n")
    if end < 0:
        return [], offset
    records = []
    for line in data[: end + 1].splitlines():
        if line.strip():
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return records, offset + end + 1


def _dict(data: Any) -> dict[str, Any]:
    return data if isinstance(data, dict) else {}


def _optional_int(value: Any) -> Optional[int]:
    return None if value is None else int(value)


@dataclass(frozen=True)
class AgentRecord:
    """``replicas/<id>/agent.json``: the replica supervisor's state.

    Schema: ``replica_id`` (str), ``pid`` (the supervisor's process),
    ``state`` (a :class:`~torch_monarch.supervision.states.SupervisorState`),
    ``restarts`` (restarts made so far), ``workers`` ({rank as str: pid} of
    the running attempt), ``t`` (``time.time()`` of the write); optional:
    ``orchestrator`` ("monarch" under the Monarch orchestrator), ``failure``
    (the failure being handled, one line), ``delay_s`` (the backoff before
    the restart).
    """

    replica_id: str
    pid: int
    state: SupervisorState
    restarts: int = 0
    workers: Mapping[int, int] = field(default_factory=dict)
    t: float = 0.0
    orchestrator: Optional[str] = None
    failure: Optional[str] = None
    delay_s: Optional[float] = None

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "replica_id": self.replica_id,
            "pid": self.pid,
            "state": self.state.value,
            "restarts": self.restarts,
            "workers": {str(rank): pid for rank, pid in self.workers.items()},
            "t": self.t,
        }
        for name in ("orchestrator", "failure", "delay_s"):
            value = getattr(self, name)
            if value is not None:
                data[name] = value
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "AgentRecord":
        return cls(
            replica_id=str(data.get("replica_id", "")),
            pid=int(data.get("pid", 0)),
            state=SupervisorState(data["state"]),
            restarts=int(data.get("restarts", 0)),
            workers={int(rank): int(pid) for rank, pid in _dict(data.get("workers")).items()},
            t=float(data.get("t", 0.0)),
            orchestrator=data.get("orchestrator"),
            failure=data.get("failure"),
            delay_s=data.get("delay_s"),
        )


@dataclass(frozen=True)
class WorkerRecord:
    """``replicas/<id>/rank<r>.json``: what a worker last reported.

    Schema: ``pid``, ``replica_id`` (str), ``rank`` (in the replica),
    ``attempt`` (``TORCHELASTIC_RESTART_COUNT``), ``state`` (a
    :class:`~torch_monarch.supervision.states.WorkerState` value, or a
    script's own word), ``started`` and ``t`` (``time.time()`` of the start
    and of the last report), ``step`` (the last step reported, absent
    before the first), plus the fields the script reported
    (``quorum_id``, ``participants``, ``loss``, ...).
    """

    pid: int
    replica_id: str
    rank: int
    attempt: int
    state: str
    started: float
    t: float
    step: Optional[int] = None
    fields: Mapping[str, Any] = field(default_factory=dict)

    _KEYS: ClassVar[tuple[str, ...]] = ("pid", "replica_id", "rank", "attempt", "state", "started", "t", "step")

    @property
    def quorum_id(self) -> Optional[int]:
        return _optional_int(self.fields.get("quorum_id"))

    @property
    def participants(self) -> Optional[int]:
        return _optional_int(self.fields.get("participants"))

    @property
    def loss(self) -> Optional[float]:
        loss = self.fields.get("loss")
        return None if loss is None else float(loss)

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "pid": self.pid,
            "replica_id": self.replica_id,
            "rank": self.rank,
            "attempt": self.attempt,
            "state": self.state,
            "started": self.started,
            "t": self.t,
            **self.fields,
        }
        if self.step is not None:
            data["step"] = self.step
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "WorkerRecord":
        return cls(
            pid=int(data["pid"]),
            replica_id=str(data.get("replica_id", "")),
            rank=int(data.get("rank", 0)),
            attempt=int(data.get("attempt", 0)),
            state=str(data.get("state", "")),
            started=float(data.get("started", 0.0)),
            t=float(data.get("t", 0.0)),
            step=_optional_int(data.get("step")),
            fields={k: v for k, v in data.items() if k not in cls._KEYS},
        )


@dataclass(frozen=True)
class StepRecord:
    """One line of ``replicas/<id>/steps.jsonl``: a step the replica committed.

    Schema: ``t`` (``time.time()``), ``step``, ``attempt`` (the workers'
    restart count), plus the fields the script recorded (``loss``,
    ``quorum_id``, ``participants``, ...).
    """

    t: float
    step: int
    attempt: int = 0
    fields: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"t": self.t, "step": self.step, "attempt": self.attempt, **self.fields}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "StepRecord":
        return cls(
            t=float(data["t"]),
            step=int(data["step"]),
            attempt=int(data.get("attempt", 0)),
            fields={k: v for k, v in data.items() if k not in ("t", "step", "attempt")},
        )


@dataclass(frozen=True)
class DrillCommand:
    """``replicas/<id>/drill/rank<r>.json``: a drill for that worker to run.

    Schema: ``id`` (the injection's number), ``kind`` (a drill kind of
    :data:`~torch_monarch.supervision.drills.DRILLS`), ``t`` (``time.time()``
    of the injection).
    """

    id: int
    kind: str
    t: float

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "kind": self.kind, "t": self.t}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "DrillCommand":
        return cls(id=int(data.get("id", -1)), kind=str(data.get("kind", "")), t=float(data.get("t", 0.0)))


@dataclass(frozen=True)
class ControlRecord:
    """``control.json``: what the job asks of every worker.

    Schema: ``start`` (true once the workers held at the start barrier,
    ``wait_for_start``, may begin; restarted workers find it set),
    ``stop_at_step`` (optional: every worker stops at that step, see
    ``stop_requested``).
    """

    start: bool = False
    stop_at_step: Optional[int] = None

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"start": self.start}
        if self.stop_at_step is not None:
            data["stop_at_step"] = self.stop_at_step
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "ControlRecord":
        return cls(start=bool(data.get("start", False)), stop_at_step=_optional_int(data.get("stop_at_step")))


class RunDir:
    """Paths and helpers of one job's run directory."""

    def __init__(self, root: PathLike) -> None:
        self.root = Path(root)

    @classmethod
    def from_env(cls) -> Optional["RunDir"]:
        root = os.environ.get("MONARCH_RUN_DIR")
        return cls(root) if root else None

    # -- layout -----------------------------------------------------------

    @property
    def events_path(self) -> Path:
        return self.root / "events.jsonl"

    @property
    def control_path(self) -> Path:
        return self.root / "control.json"

    def replica_dir(self, replica_id: str) -> Path:
        return self.root / "replicas" / str(replica_id)

    def agent_path(self, replica_id: str) -> Path:
        return self.replica_dir(replica_id) / "agent.json"

    def worker_path(self, replica_id: str, rank: int) -> Path:
        return self.replica_dir(replica_id) / f"rank{rank}.json"

    def steps_path(self, replica_id: str) -> Path:
        return self.replica_dir(replica_id) / "steps.jsonl"

    def drill_path(self, replica_id: str, rank: int) -> Path:
        return self.replica_dir(replica_id) / "drill" / f"rank{rank}.json"

    def escalation_path(self, replica_id: str) -> Path:
        return self.replica_dir(replica_id) / "escalation.json"

    def logs_dir(self, replica_id: str) -> Path:
        return self.replica_dir(replica_id) / "logs"

    def replica_ids(self) -> list[str]:
        base = self.root / "replicas"
        if not base.is_dir():
            return []
        return sorted((p.name for p in base.iterdir() if p.is_dir()), key=_natural)

    # -- records ----------------------------------------------------------

    def read_agent(self, replica_id: str) -> Optional[AgentRecord]:
        data = read_json(self.agent_path(replica_id))
        return AgentRecord.from_json(data) if isinstance(data, dict) and "state" in data else None

    def write_agent(self, record: AgentRecord) -> None:
        write_json(self.agent_path(record.replica_id), record.to_json())

    def read_worker(self, replica_id: str, rank: int) -> Optional[WorkerRecord]:
        data = read_json(self.worker_path(replica_id, rank))
        return WorkerRecord.from_json(data) if isinstance(data, dict) and "pid" in data else None

    def write_worker(self, record: WorkerRecord) -> None:
        write_json(self.worker_path(record.replica_id, record.rank), record.to_json())

    def read_escalation(self, replica_id: str) -> Optional[Failure]:
        data = read_json(self.escalation_path(replica_id))
        return Failure.from_json(data) if isinstance(data, dict) else None

    def write_escalation(self, replica_id: str, failure: Failure) -> None:
        write_json(self.escalation_path(replica_id), failure.to_json())

    def clear_escalation(self, replica_id: str) -> None:
        """A new allocation of the replica starts with a clean record."""
        self.escalation_path(replica_id).unlink(missing_ok=True)

    def write_drill(self, replica_id: str, rank: int, command: DrillCommand) -> None:
        write_json(self.drill_path(replica_id, rank), command.to_json())

    def take_drill(self, replica_id: str, rank: int) -> Optional[DrillCommand]:
        """The worker's pending drill, removed so that it runs once (None when there is none)."""
        path = self.drill_path(replica_id, rank)
        try:
            os.stat(path)
        except FileNotFoundError:
            return None
        data = read_json(path)
        try:
            os.unlink(path)
        except FileNotFoundError:
            return None  # taken already
        return DrillCommand.from_json(_dict(data))

    def read_control(self) -> ControlRecord:
        return ControlRecord.from_json(_dict(read_json(self.control_path)))

    def write_control(self, record: ControlRecord) -> None:
        write_json(self.control_path, record.to_json())

    # -- events and steps ---------------------------------------------------

    def event(self, event: Union[Event, str], t: Optional[float] = None, **fields: Any) -> dict[str, Any]:
        """Appends an event to the timeline and returns it.

        ``event``: one of the package's :class:`Event` names, or a training script's own.
        """
        name = event.value if isinstance(event, Event) else event
        record = {"t": time.time() if t is None else t, "event": name, **fields}
        append_jsonl(self.events_path, record)
        return record

    def events(self) -> list[dict[str, Any]]:
        records, _ = read_jsonl(self.events_path)
        return records

    def record_step(self, replica_id: str, record: StepRecord) -> None:
        append_jsonl(self.steps_path(replica_id), record.to_json())

    def iter_steps(self, replica_id: str) -> Iterator[StepRecord]:
        records, _ = read_jsonl(self.steps_path(replica_id))
        yield from (StepRecord.from_json(r) for r in records)


def _natural(name: str) -> tuple[int, str]:
    digits = "".join(ch for ch in name if ch.isdigit())
    return (int(digits) if digits else 0, name)
