"""Runs a test function in N real processes on loopback and collects the results.

The parent spawns one process per rank (``multiprocessing`` "spawn" context),
each of which runs a named top-level ``worker(ctx, *args)`` function and sends
back either its return value or the exception it raised. The parent enforces a
wall-clock bound and always kills and reaps every child, whatever happens, so
a hung or crashed rank fails the test instead of hanging it or leaking
processes.

Rendezvous is fresh per run: ``ctx.init_method`` is a ``file://`` URL in a new
temporary directory, and ``ctx.store()`` returns a FileStore on it for tests
that build groups by hand. Return values travel by plain pickle (tensors are
copied by value), so keep them small: lists of failure strings, numbers.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import multiprocessing.connection
import os
import pickle
import shutil
import signal
import socket
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Callable, Optional, Sequence

__all__ = [
    "RankError",
    "RankResult",
    "WorkerContext",
    "MultiProcessError",
    "free_port",
    "run_workers",
    "run_workers_ok",
]

# Every rank of every run is bounded by this unless the caller says otherwise.
DEFAULT_TIMEOUT_S = 120.0
# After one rank failed, how long the others get to report before they are killed.
FAILURE_GRACE_S = 15.0
# How long a rank may take to exit after it reported its result.
EXIT_GRACE_S = 20.0
_PR_SET_PDEATHSIG = 1


_aux_store: Any = None


@dataclass(frozen=True)
class WorkerContext:
    """What a worker function knows about its run."""

    rank: int
    world_size: int
    # file:// URL of a fresh store for init_process_group.
    init_method: str
    # A second fresh store file, for the ranks' own coordination.
    aux_store_path: str
    tmp_dir: str

    def store(self) -> Any:
        """This process's FileStore on the run's auxiliary store file."""
        global _aux_store
        if _aux_store is None:
            import torch.distributed as dist

            _aux_store = dist.FileStore(self.aux_store_path, self.world_size)
        return _aux_store

    def init(
        self,
        backend: str = "monarch",
        timeout: timedelta = timedelta(seconds=60),
        pg_options: Any = None,
    ) -> None:
        """init_process_group for this rank over the run's fresh file store."""
        import torch.distributed as dist

        import torch_monarch  # noqa: F401 - registers "monarch"

        dist.init_process_group(
            backend=backend,
            init_method=self.init_method,
            rank=self.rank,
            world_size=self.world_size,
            timeout=timeout,
            pg_options=pg_options,
        )


@dataclass(frozen=True)
class RankError:
    """An exception a rank raised, as the parent sees it."""

    type_name: str
    # Names of the exception's classes, most derived first (for isinstance-like checks).
    class_names: tuple[str, ...]
    message: str
    traceback: str

    def is_a(self, type_name: str) -> bool:
        return type_name in self.class_names


@dataclass
class RankResult:
    rank: int
    value: Any = None
    error: Optional[RankError] = None
    exit_code: Optional[int] = None
    # Set when the parent gave up on the rank: it hung, died without
    # reporting, or did not exit after reporting.
    problem: Optional[str] = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.problem is None


@dataclass
class MultiProcessError(AssertionError):
    """A run in which some rank failed, hung or crashed."""

    results: list[RankResult] = field(default_factory=list)

    def __str__(self) -> str:
        lines = ["multi-process run failed:"]
        for result in self.results:
            if result.ok:
                continue
            if result.problem is not None:
                lines.append(f"  rank {result.rank}: {result.problem} (exit code {result.exit_code})")
            if result.error is not None:
                lines.append(f"  rank {result.rank} raised {result.error.type_name}: {result.error.message}")
                lines.append("    " + result.error.traceback.replace("\n", "\n    "))
        return "\n".join(lines)


def free_port() -> int:
    """A TCP port on loopback that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _describe_exception(error: BaseException) -> RankError:
    return RankError(
        type_name=type(error).__name__,
        class_names=tuple(cls.__name__ for cls in type(error).__mro__),
        message=str(error),
        traceback="".join(traceback.format_exception(error)),
    )


def _die_with_parent() -> None:
    """Asks Linux to SIGKILL this process when the parent dies, so that even
    a parent killed outright (pytest-timeout, kill -9) leaves no ranks behind."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass  # not Linux: the parent's finally-block cleanup still applies


def _child_main(
    fn: Callable[..., Any],
    ctx: WorkerContext,
    args: tuple[Any, ...],
    env: dict[str, str],
    conn: multiprocessing.connection.Connection,
    parent_pid: int,
) -> None:
    _die_with_parent()
    if os.getppid() != parent_pid:
        os._exit(1)  # the parent died before the request took effect
    os.environ.update(env)
    import torch
    import torch.distributed as dist

    # Ranks share two cores; intra-op threads would only fight each other.
    torch.set_num_threads(1)
    try:
        payload: tuple[str, Any] = ("ok", fn(ctx, *args))
    except BaseException as error:  # noqa: BLE001 - everything goes back to the parent
        payload = ("error", _describe_exception(error))
    try:
        data = pickle.dumps(payload)
    except Exception as error:  # noqa: BLE001
        data = pickle.dumps(("error", _describe_exception(error)))
    conn.send_bytes(data)
    conn.close()
    # Orderly teardown is part of what is tested: a crash or hang here shows
    # up as a non-zero exit code or a kill by the parent.
    if dist.is_initialized():
        dist.destroy_process_group()


def run_workers(
    fn: Callable[..., Any],
    world_size: int,
    *args: Any,
    timeout: float = DEFAULT_TIMEOUT_S,
    env: Optional[dict[str, str]] = None,
) -> list[RankResult]:
    """Runs ``fn(ctx, *args)`` on ranks 0..world_size-1 and returns what each did.

    ``fn`` must be a module-level function (spawn pickles it by name). Never
    raises for a rank's failure; see ``run_workers_ok`` for the strict form.
    """
    mp = multiprocessing.get_context("spawn")
    tmp_dir = tempfile.mkdtemp(prefix="monarch-test-")
    child_env = {"OMP_NUM_THREADS": "1", **(env or {})}
    processes: list[multiprocessing.process.BaseProcess] = []
    readers: list[multiprocessing.connection.Connection] = []
    results = [RankResult(rank=rank) for rank in range(world_size)]
    try:
        for rank in range(world_size):
            ctx = WorkerContext(
                rank=rank,
                world_size=world_size,
                init_method=f"file://{os.path.join(tmp_dir, 'init_store')}",
                aux_store_path=os.path.join(tmp_dir, "aux_store"),
                tmp_dir=tmp_dir,
            )
            reader, writer = mp.Pipe(duplex=False)
            process = mp.Process(
                target=_child_main,
                args=(fn, ctx, args, child_env, writer, os.getpid()),
                name=f"rank{rank}",
                daemon=True,
            )
            process.start()
            writer.close()
            processes.append(process)
            readers.append(reader)
        _collect(processes, readers, results, time.monotonic() + timeout)
        _await_exit(processes, results, time.monotonic() + EXIT_GRACE_S)
    finally:
        _kill_all(processes)
        for reader in readers:
            reader.close()
        shutil.rmtree(tmp_dir, ignore_errors=True)
    for rank, process in enumerate(processes):
        results[rank].exit_code = process.exitcode
    return results


def _collect(
    processes: Sequence[multiprocessing.process.BaseProcess],
    readers: Sequence[multiprocessing.connection.Connection],
    results: list[RankResult],
    deadline: float,
) -> None:
    """Reads each rank's result until all reported, one died, or time is up."""
    pending = set(range(len(processes)))
    reader_rank = {id(reader): rank for rank, reader in enumerate(readers)}
    sentinel_rank = {process.sentinel: rank for rank, process in enumerate(processes)}
    while pending:
        now = time.monotonic()
        if now >= deadline:
            for rank in pending:
                results[rank].problem = "did not report within the time bound (hung?)"
            return
        waitables: list[Any] = [readers[rank] for rank in pending]
        waitables += [processes[rank].sentinel for rank in pending]
        for ready in multiprocessing.connection.wait(waitables, timeout=deadline - now):
            is_pipe = isinstance(ready, multiprocessing.connection.Connection)
            rank = reader_rank[id(ready)] if is_pipe else sentinel_rank[ready]
            if rank not in pending:
                continue  # its pipe and its sentinel were both ready
            if is_pipe or readers[rank].poll():
                # A rank that exited may still have its result in the pipe.
                _read_result(readers[rank], results[rank])
            else:
                results[rank].problem = "exited without reporting a result (crashed?)"
            pending.discard(rank)
        if any(not results[rank].ok for rank in range(len(results)) if rank not in pending):
            # Peers of a failed rank may block until their op timeout; give
            # them a bounded while to report their own view.
            deadline = min(deadline, time.monotonic() + FAILURE_GRACE_S)


def _read_result(reader: multiprocessing.connection.Connection, result: RankResult) -> None:
    try:
        status, value = pickle.loads(reader.recv_bytes())
    except EOFError:
        result.problem = "exited without reporting a result (crashed?)"
        return
    except OSError as error:
        result.problem = f"result pipe broke: {error!r}"
        return
    if status == "ok":
        result.value = value
    else:
        result.error = value


def _await_exit(
    processes: Sequence[multiprocessing.process.BaseProcess], results: list[RankResult], deadline: float
) -> None:
    for rank, process in enumerate(processes):
        if results[rank].problem is not None:
            continue  # already a failure; it gets killed below
        process.join(max(0.0, deadline - time.monotonic()))
        if process.exitcode is None:
            results[rank].problem = "reported but did not exit (teardown hung?)"
        elif process.exitcode != 0:
            results[rank].problem = f"reported but exited with code {process.exitcode} during teardown"


def _kill_all(processes: Sequence[multiprocessing.process.BaseProcess]) -> None:
    for process in processes:
        if process.exitcode is None:
            process.kill()
    for process in processes:
        process.join(10.0)
        if process.exitcode is None:
            raise RuntimeError(f"could not reap {process.name} (pid {process.pid})")


def run_workers_ok(
    fn: Callable[..., Any],
    world_size: int,
    *args: Any,
    timeout: float = DEFAULT_TIMEOUT_S,
    env: Optional[dict[str, str]] = None,
) -> list[Any]:
    """Like run_workers, but every rank must succeed; returns their values by rank."""
    results = run_workers(fn, world_size, *args, timeout=timeout, env=env)
    if not all(result.ok for result in results):
        raise MultiProcessError(results)
    return [result.value for result in results]
