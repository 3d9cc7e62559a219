"""The worker side of supervision: report errors, progress, and take drills.

A training script launched by ``monarch-run`` (or by torchrun) calls::

    from torch_monarch import supervision

    @supervision.supervised          # init_worker() + report_training_error on the way out
    def main() -> None:
        ctx = supervision.worker_context()
        for step in ...:
            ...
            supervision.report_progress(step, loss=loss.item())

* :func:`report_training_error` writes the exception with its full
  traceback into the error file the elastic agent reads
  (``TORCHELASTIC_ERROR_FILE``, torch.distributed.elastic's format plus a
  ``monarch`` section with the failure kind and, for the backend's typed
  errors, the failed ranks), before the process exits.
* :func:`init_worker` enables ``faulthandler`` so a segfault still leaves
  every thread's Python stack in the worker's stderr log, and asks the
  kernel to kill the worker if its supervisor dies (no orphans).
* :func:`report_progress` is the worker's heartbeat: the replica supervisor
  declares a worker hung when its progress stops. It also runs failure
  drills requested by ``--inject-failures`` (exceptions, collective
  failures) at a safe point of the training loop.

Everything degrades to no-ops outside a supervised job, so the same script
runs under plain ``torchrun`` or ``python``.
"""

from __future__ import annotations

import faulthandler
import functools
import logging
import os
import sys
import threading
import time
import traceback
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any, Callable, Dict, Optional, TypeVar, Union

from torch_monarch._config import Duration, as_timedelta
from torch_monarch._lifetime import die_with_parent
from torch_monarch.supervision.events import Event
from torch_monarch.supervision.failure import FailureKind
from torch_monarch.supervision.rundir import ControlRecord, RunDir, StepRecord, WorkerRecord, write_json
from torch_monarch.supervision.states import WorkerState

__all__ = [
    "error_reported",
    "InjectedFailure",
    "WorkerContext",
    "init_worker",
    "record_step",
    "register_drill",
    "report_progress",
    "report_training_error",
    "stop_requested",
    "supervised",
    "wait_for_start",
    "worker_context",
]

logger: logging.Logger = logging.getLogger(__name__)

R = TypeVar("R")


class InjectedFailure(RuntimeError):
    """Raised by the ``exc`` failure drill."""


@dataclass(frozen=True)
class WorkerContext:
    """Who this worker is, from the environment its launcher set.

    Attributes:
        replica_id: the replica group (``MONARCH_REPLICA_ID``, else TorchFT's
            ``REPLICA_GROUP_ID``, else ``"0"``).
        rank: rank within the replica (``RANK``).
        local_rank: rank on this host (``LOCAL_RANK``).
        world_size: workers in the replica (``WORLD_SIZE``).
        restart_count: how often the replica's workers were restarted
            (``TORCHELASTIC_RESTART_COUNT``).
        run_dir: the job's run directory, None outside ``monarch-run``.
        error_file: where :func:`report_training_error` writes.
        supervisor_pid: the replica supervisor's pid, if any.
    """

    replica_id: str
    rank: int
    local_rank: int
    world_size: int
    restart_count: int
    run_dir: Optional[RunDir]
    error_file: Optional[str]
    supervisor_pid: Optional[int]

    @classmethod
    def from_env(cls) -> "WorkerContext":
        env = os.environ
        supervisor = env.get("MONARCH_SUPERVISOR_PID")
        return cls(
            replica_id=env.get("MONARCH_REPLICA_ID") or env.get("REPLICA_GROUP_ID") or "0",
            rank=int(env.get("RANK", "0")),
            local_rank=int(env.get("LOCAL_RANK", "0")),
            world_size=int(env.get("WORLD_SIZE", "1")),
            restart_count=int(env.get("TORCHELASTIC_RESTART_COUNT", "0")),
            run_dir=RunDir.from_env(),
            error_file=env.get("TORCHELASTIC_ERROR_FILE"),
            supervisor_pid=int(supervisor) if supervisor else None,
        )

    @property
    def who(self) -> str:
        return f"replica {self.replica_id} / rank {self.rank} (pid {os.getpid()})"


class _State:
    """Per-process worker state (module-level singleton)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.context: Optional[WorkerContext] = None
        self.drills: Dict[str, Callable[[], None]] = {}
        self.control_mtime: float = -1.0
        self.control = ControlRecord()
        self.status: Optional[WorkerRecord] = None
        self.reported_error = False


_state = _State()


def worker_context() -> WorkerContext:
    """This worker's context (initialising the worker runtime on first use)."""
    if _state.context is None:
        init_worker()
    assert _state.context is not None
    return _state.context


def init_worker() -> WorkerContext:
    """Prepares this process to be supervised; safe to call more than once.

    Enables faulthandler (stacks of all threads on SIGSEGV/SIGABRT/SIGBUS/
    SIGFPE/SIGILL go to stderr, which the agent keeps in the worker's log),
    arranges for the kernel to kill this worker if its supervisor dies, and
    records that the worker started.
    """
    with _state.lock:
        if _state.context is not None:
            return _state.context
        ctx = WorkerContext.from_env()
        _state.context = ctx
    if not faulthandler.is_enabled():
        faulthandler.enable(all_threads=True)
    if ctx.supervisor_pid is not None:
        die_with_parent()
    now = time.time()
    _state.status = WorkerRecord(
        pid=os.getpid(),
        replica_id=ctx.replica_id,
        rank=ctx.rank,
        attempt=ctx.restart_count,
        state=WorkerState.STARTING.value,
        started=now,
        t=now,
    )
    if ctx.run_dir is not None:
        ctx.run_dir.write_worker(_state.status)
        ctx.run_dir.event(
            Event.WORKER_STARTED, replica=ctx.replica_id, rank=ctx.rank, pid=os.getpid(), attempt=ctx.restart_count
        )
    return ctx


def _classify(exc: BaseException) -> tuple[FailureKind, list[int]]:
    """Exception kind; collective errors carry the ranks the backend named."""
    from torch_monarch.errors import MonarchError

    if isinstance(exc, MonarchError):
        return FailureKind.COLLECTIVE, list(exc.failed_ranks)
    try:
        from torch.distributed import DistBackendError, DistError

        if isinstance(exc, (DistBackendError, DistError)):
            return FailureKind.COLLECTIVE, []
    except ImportError:  # pragma: no cover
        pass
    return FailureKind.EXCEPTION, []


def report_training_error(exc: Optional[BaseException] = None, *, kind: Optional[FailureKind] = None) -> dict[str, Any]:
    """Reports ``exc`` (default: the exception being handled) to the supervisor.

    Call it before the process exits: it writes the exception, its full
    traceback, the failure kind and, for a collective error, the failed
    ranks into ``TORCHELASTIC_ERROR_FILE``, where the elastic agent reads it
    when it sees the exit. Without a supervisor it only logs. Returns the
    report.
    """
    if exc is None:
        exc = sys.exc_info()[1]
    if exc is None:
        raise ValueError("report_training_error needs an exception (or to be called from an except block)")
    ctx = worker_context()
    detected_kind, failed_ranks = _classify(exc)
    kind = kind or detected_kind
    tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    now = time.time()
    message = f"{type(exc).__name__}: {exc}"
    report = {
        # torch.distributed.elastic's error file format (read by ProcessFailure).
        "message": {
            "message": message,
            "extraInfo": {"py_callstack": tb, "timestamp": str(int(now))},
        },
        "monarch": {
            "kind": kind.value,
            "time": now,
            "message": message,
            "traceback": tb,
            "error_type": type(exc).__name__,
            "failed_ranks": failed_ranks,
            "replica_id": ctx.replica_id,
            "rank": ctx.rank,
            "pid": os.getpid(),
        },
    }
    logger.error("%s: %s failure reported to the supervisor:\n%s", ctx.who, kind.value, tb)
    if ctx.error_file:
        write_json(ctx.error_file, report)
    if ctx.run_dir is not None:
        ctx.run_dir.event(
            Event.WORKER_ERROR,
            t=now,
            replica=ctx.replica_id,
            rank=ctx.rank,
            pid=os.getpid(),
            kind=kind.value,
            error_type=type(exc).__name__,
            message=str(exc)[:500],
            failed_ranks=failed_ranks,
        )
    _state.reported_error = True
    return report


def error_reported() -> bool:
    """True once this process has called :func:`report_training_error`."""
    return _state.reported_error


def register_drill(kind: str, action: Callable[[], None]) -> None:
    """Sets what failure drill ``kind`` does in this worker.

    The built-in ``exc`` raises :class:`InjectedFailure`; ``exit`` exits with
    code 3; ``comm`` aborts the default process group (a collective failure
    for this worker and its peers). A script whose collectives do not run on
    the default group registers its own ``comm``.
    """
    _state.drills[kind] = action


def _abort_default_group() -> None:
    """Aborts the default group's backend (its links) but keeps the group object.

    Like a link failure: this worker's next collective raises the backend's
    error and its peers see this rank fail, instead of a "not initialized"
    error from a group that no longer exists.
    """
    import torch.distributed as dist

    if not dist.is_initialized():
        raise InjectedFailure("comm drill: no process group to abort")
    dist.distributed_c10d._get_default_group().abort()


def _raise_injected() -> None:
    raise InjectedFailure("failure drill: injected exception")


def _exit_injected() -> None:
    sys.stderr.flush()
    os._exit(3)


_BUILTIN_DRILLS: Dict[str, Callable[[], None]] = {
    "exc": _raise_injected,
    "exit": _exit_injected,
    "comm": _abort_default_group,
}


def _run_drills(ctx: WorkerContext) -> None:
    assert ctx.run_dir is not None
    command = ctx.run_dir.take_drill(ctx.replica_id, ctx.rank)
    if command is None:
        return
    kind = command.kind
    action = _state.drills.get(kind) or _BUILTIN_DRILLS.get(kind)
    ctx.run_dir.event(
        Event.INJECTED, replica=ctx.replica_id, rank=ctx.rank, pid=os.getpid(), kind=kind, drill_id=command.id
    )
    if action is None:
        logger.warning("unknown failure drill %r ignored", kind)
        return
    logger.warning("%s: running failure drill %r", ctx.who, kind)
    action()


def report_progress(step: int, *, state: Union[WorkerState, str] = WorkerState.TRAINING, **fields: Any) -> None:
    """The worker's heartbeat and status: call once per training step.

    ``state``: a :class:`~torch_monarch.supervision.states.WorkerState`
    value (or the script's own word). ``fields`` (quorum_id, participants,
    loss, ...) show in the launcher's status view. Also runs any pending
    failure drill for this worker.
    """
    ctx = worker_context()
    if ctx.run_dir is None:
        return
    assert _state.status is not None
    status = replace(
        _state.status,
        state=state.value if isinstance(state, WorkerState) else state,
        step=step,
        t=time.time(),
        fields={**_state.status.fields, **fields},
    )
    _state.status = status
    ctx.run_dir.write_worker(status)
    _run_drills(ctx)


def record_step(step: int, **fields: Any) -> None:
    """Appends a committed step to the replica's step log (call from one rank)."""
    ctx = worker_context()
    if ctx.run_dir is None:
        return
    ctx.run_dir.record_step(ctx.replica_id, StepRecord(t=time.time(), step=step, attempt=ctx.restart_count, fields=fields))


def event(name: Union[Event, str], **fields: Any) -> None:
    """Adds an event of this worker to the job's timeline (an :class:`Event`, or the script's own name)."""
    ctx = worker_context()
    if ctx.run_dir is not None:
        ctx.run_dir.event(name, replica=ctx.replica_id, rank=ctx.rank, pid=os.getpid(), **fields)


def stop_requested(step: int) -> bool:
    """True once the job asked workers to stop at or before ``step`` (``control.json``)."""
    stop_at = _control().stop_at_step
    return stop_at is not None and step >= stop_at


def _control() -> ControlRecord:
    ctx = worker_context()
    if ctx.run_dir is None:
        return ControlRecord()
    try:
        mtime = os.stat(ctx.run_dir.control_path).st_mtime
    except FileNotFoundError:
        return ControlRecord()
    if mtime != _state.control_mtime:
        _state.control = ctx.run_dir.read_control()
        _state.control_mtime = mtime
    return _state.control


def wait_for_start(timeout: Duration = timedelta(minutes=10), poll_s: float = 0.05) -> None:
    """Holds a ready worker until the job says ``start`` (``control.json``).

    Only when the launcher asked for a start barrier (``MONARCH_START_BARRIER=1``,
    e.g. the demo, so that every replica starts from step 0 together);
    otherwise returns at once. Restarted workers find ``start`` already set.
    ``timeout``: a timedelta or a number of seconds.
    """
    ctx = worker_context()
    if ctx.run_dir is None or os.environ.get("MONARCH_START_BARRIER") != "1":
        return
    report_progress(0, state=WorkerState.READY)
    wait = as_timedelta(timeout, "wait_for_start(timeout)").total_seconds()
    deadline = time.monotonic() + wait
    while not _control().start:
        if time.monotonic() > deadline:
            raise TimeoutError(f"no start signal in {ctx.run_dir.control_path} after {wait:.0f}s")
        time.sleep(poll_s)


def supervised(main: Callable[..., R]) -> Callable[..., Optional[R]]:
    """Decorator for a worker's main: init, and report any error before exiting.

    An exception escaping ``main`` is reported with its traceback
    (:func:`report_training_error`) and the process exits with code 1.
    """

    @functools.wraps(main)
    def wrapper(*args: Any, **kwargs: Any) -> Optional[R]:
        init_worker()
        try:
            return main(*args, **kwargs)
        except SystemExit as e:
            if e.code not in (None, 0):
                report_training_error(e, kind=FailureKind.EXIT_CODE)
            raise
        except BaseException as e:  # noqa: BLE001 - report everything, then die
            report_training_error(e)
            sys.stderr.flush()
            sys.stdout.flush()
            os._exit(1)

    return wrapper
