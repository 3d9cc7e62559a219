"""The run directory: how the processes of one job talk about their state.

Supervisors and workers of a job share a directory (``MONARCH_RUN_DIR``):

``events.jsonl``
    append-only timeline of the job: failures injected, detected and
    handled, restarts, heals, quorum changes. One JSON object per line, each
    with ``t`` (``time.time()``) and ``event``; small appends with O_APPEND
    do not interleave between processes.
``replicas/<id>/agent.json``
    the replica supervisor's state (running, restarting, failed, ...),
    restart count, worker pids.
``replicas/<id>/rank<r>.json``
    each worker's last progress report (step, quorum id, participants,
    loss, pid); also its heartbeat for the hang probe.
``replicas/<id>/steps.jsonl``
    one line per committed step from the replica's rank 0 (the loss curve).
``replicas/<id>/drill/rank<r>.json``
    a failure-drill command for that worker (``--inject-failures``).
``replicas/<id>/logs/``
    the elastic agent's per-attempt worker logs (stdout, stderr, error.json).
``control.json``
    job-wide requests to the workers (``stop_at_step``).

A local file tree is what the local scheduler needs; a cluster job keeps it
on a shared file system (or only the local parts of it).
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator, Optional, Union

__all__ = ["RunDir", "append_jsonl", "read_json", "read_jsonl", "write_json"]

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

    # -- events -----------------------------------------------------------

    def event(self, event: str, t: Optional[float] = None, **fields: Any) -> dict[str, Any]:
        """Appends an event to the timeline and returns it."""
        record = {"t": time.time() if t is None else t, "event": event, **fields}
        append_jsonl(self.events_path, record)
        return record

    def events(self) -> list[dict[str, Any]]:
        records, _ = read_jsonl(self.events_path)
        return records

    def iter_steps(self, replica_id: str) -> Iterator[dict[str, Any]]:
        records, _ = read_jsonl(self.steps_path(replica_id))
        yield from records


def _natural(name: str) -> tuple[int, str]:
    digits = "".join(ch for ch in name if ch.isdigit())
    return (int(digits) if digits else 0, name)
