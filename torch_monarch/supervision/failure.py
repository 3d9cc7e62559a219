"""``Failure``: what went wrong, where, when, with which evidence.

A failure travels up the supervision tree (worker → ReplicaSupervisor →
Orchestrator) as one immutable record. It is built from what the supervisor
can observe of a dead or hung worker:

* the exit status (code or signal) of the process, read by the elastic
  agent;
* the error file the worker wrote before dying (``report_training_error``:
  the exception, its full traceback, and for a collective error the failed
  ranks);
* the tail of the worker's stderr, where ``faulthandler`` writes every
  thread's Python stack on a segfault;
* the supervisor's own hang probes (process stopped, no progress).
"""

from __future__ import annotations

import dataclasses
import enum
import json
import signal as _signal
import os
import time
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Sequence, Union

__all__ = ["Failure", "FailureKind", "read_tail", "root_cause"]

#: how much of a worker's stderr a failure keeps as evidence (faulthandler's stacks are at its end)
STDERR_TAIL_BYTES = 64 * 1024


class FailureKind(str, enum.Enum):
    """How a worker failed."""

    #: The process exited with a non-zero code and left no error report.
    EXIT_CODE = "exit_code"
    #: The process was ended by a signal (SIGKILL, SIGSEGV, ...).
    SIGNAL = "signal"
    #: The training code raised; the report carries the traceback.
    EXCEPTION = "exception"
    #: The process stopped making progress (stopped, deadlocked, ...).
    HANG = "hang"
    #: A collective failed (the backend's typed errors: a peer died or hung,
    #: the group was aborted, ops mismatched or timed out).
    COLLECTIVE = "collective"


# When several workers of one replica fail together, the root cause is the
# most specific one: a hang or a crash usually makes its peers' collectives
# fail, not the other way round.
_PRIORITY = {
    FailureKind.HANG: 0,
    FailureKind.SIGNAL: 1,
    FailureKind.EXCEPTION: 2,
    FailureKind.EXIT_CODE: 3,
    FailureKind.COLLECTIVE: 4,
}


@dataclass(frozen=True)
class Failure:
    """One failure, as seen by the supervisor that observed it.

    Attributes:
        who: human-readable origin, e.g. ``"replica 0 / rank 1 (pid 4242)"``.
        kind: see :class:`FailureKind`.
        time: wall-clock time (``time.time()``) the failure happened, as
            precisely as known (the worker's own report, else detection).
        message: one line: the exception, signal or probe that fired.
        traceback: the full Python traceback of an exception, or the
            faulthandler dump of a crashed process; empty when none exists.
        replica_id: replica the worker belongs to.
        rank: the worker's rank within its replica.
        pid: the worker's process id.
        exitcode: process exit code; negative for a signal (``-9``).
        signal: signal name for ``SIGNAL`` (``"SIGSEGV"``) or a stopped hang.
        failed_ranks: for ``COLLECTIVE``: the peers the backend named.
        error_type: exception class name for ``EXCEPTION``/``COLLECTIVE``.
        detected_at: when the supervisor noticed it.
        escalated_by: supervisors that declined to handle it, innermost first.
        related: other workers' failures of the same incident (consequences).
    """

    who: str
    kind: FailureKind
    time: float
    message: str
    traceback: str = ""
    replica_id: Optional[str] = None
    rank: Optional[int] = None
    pid: Optional[int] = None
    exitcode: Optional[int] = None
    signal: Optional[str] = None
    failed_ranks: tuple[int, ...] = ()
    error_type: Optional[str] = None
    detected_at: Optional[float] = None
    escalated_by: tuple[str, ...] = ()
    related: tuple["Failure", ...] = field(default=(), compare=False)

    def escalated(self, by: str) -> "Failure":
        """This failure, marked as declined by supervisor ``by``."""
        return dataclasses.replace(self, escalated_by=(*self.escalated_by, by))

    def describe(self) -> str:
        """One line for logs and status views."""
        what = self.kind.value
        if self.kind is FailureKind.SIGNAL and self.signal:
            what = f"signal {self.signal}"
        elif self.kind is FailureKind.EXIT_CODE and self.exitcode is not None:
            what = f"exit code {self.exitcode}"
        elif self.kind is FailureKind.COLLECTIVE and self.failed_ranks:
            what = f"collective (failed ranks {list(self.failed_ranks)})"
        return f"{self.who}: {what}: {self.message}"

    def event_fields(self) -> dict[str, Any]:
        """What a supervisor's ``detected`` event in the run directory records of this failure."""
        return dict(
            kind=self.kind.value,
            who=self.who,
            rank=self.rank,
            pid=self.pid,
            message=self.message,
            failure_time=self.time,
            failed_ranks=list(self.failed_ranks),
            signal=self.signal,
            traceback=self.traceback[-4000:],
            related=[r.describe() for r in self.related],
        )

    def to_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["kind"] = self.kind.value
        data["failed_ranks"] = list(self.failed_ranks)
        data["escalated_by"] = list(self.escalated_by)
        data["related"] = [r.to_json() for r in self.related]
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "Failure":
        values = dict(data)
        values["kind"] = FailureKind(values["kind"])
        values["failed_ranks"] = tuple(values.get("failed_ranks") or ())
        values["escalated_by"] = tuple(values.get("escalated_by") or ())
        values["related"] = tuple(cls.from_json(r) for r in values.get("related") or ())
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in values.items() if k in known})

    def dumps(self) -> str:
        return json.dumps(self.to_json())

    @classmethod
    def from_exit(
        cls,
        *,
        who: str,
        exitcode: int,
        replica_id: Optional[str] = None,
        rank: Optional[int] = None,
        pid: Optional[int] = None,
        report: Optional[Mapping[str, Any]] = None,
        stderr_tail: str = "",
        detected_at: Optional[float] = None,
    ) -> "Failure":
        """Builds the failure of a process that exited with ``exitcode``.

        ``report`` is the worker's error file (see ``report_training_error``),
        ``stderr_tail`` the end of its stderr (faulthandler output).
        """
        now = time.time() if detected_at is None else detected_at
        common: dict[str, Any] = dict(
            who=who, replica_id=replica_id, rank=rank, pid=pid, exitcode=exitcode, detected_at=now
        )
        extras = dict((report or {}).get("monarch") or {})
        if exitcode < 0:
            try:
                name = _signal.Signals(-exitcode).name
            except ValueError:
                name = f"signal {-exitcode}"
            dump = _faulthandler_section(stderr_tail)
            return cls(
                kind=FailureKind.SIGNAL,
                time=float(extras.get("time", now)),
                message=f"terminated by {name}",
                traceback=dump,
                signal=name,
                **common,
            )
        if extras:
            kind = FailureKind(extras.get("kind", FailureKind.EXCEPTION.value))
            return cls(
                kind=kind,
                time=float(extras.get("time", now)),
                message=str(extras.get("message", "")),
                traceback=str(extras.get("traceback", "")),
                failed_ranks=tuple(int(r) for r in extras.get("failed_ranks") or ()),
                error_type=extras.get("error_type"),
                **common,
            )
        if report and isinstance(report.get("message"), dict):
            # An error file written by torch.distributed.elastic's @record
            # (a script that does not use torch_monarch's reporting).
            message = report["message"]
            return cls(
                kind=FailureKind.EXCEPTION,
                time=float(message.get("extraInfo", {}).get("timestamp", now)),
                message=str(message.get("message", "")),
                traceback=str(message.get("extraInfo", {}).get("py_callstack", "")),
                **common,
            )
        return cls(
            kind=FailureKind.EXIT_CODE,
            time=now,
            message=f"exited with code {exitcode}",
            traceback=_faulthandler_section(stderr_tail) or _last_lines(stderr_tail, 20),
            **common,
        )


def root_cause(failures: Sequence[Failure]) -> Failure:
    """The failure that most likely caused the others; the others become ``related``.

    A hang or crash comes before the exceptions and collective errors it
    causes in its peers; among equals, the earliest wins.
    """
    if not failures:
        raise ValueError("root_cause needs at least one failure")
    ordered = sorted(failures, key=lambda f: (_PRIORITY[f.kind], f.time))
    root = ordered[0]
    others = tuple(f for f in failures if f is not root)
    return dataclasses.replace(root, related=(*root.related, *others))


def _faulthandler_section(stderr_tail: str) -> str:
    """The faulthandler dump ("Fatal Python error: ..." and the stacks) in ``stderr_tail``."""
    marker = "Fatal Python error"
    index = stderr_tail.rfind(marker)
    if index < 0:
        return ""
    return stderr_tail[index:].strip()


def _last_lines(text: str, n: int) -> str:
    return "\n".join(text.strip().splitlines()[-n:])


def read_tail(path: Union[str, "os.PathLike[str]"], limit: int = STDERR_TAIL_BYTES) -> str:
    """The last ``limit`` bytes of a worker's log (its stderr), "" when unreadable."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - limit))
            return f.read().decode(errors="replace")
    except OSError:
        return ""
