"""Runs a function in N real processes on loopback and collects the results.

The one multi-process harness of the tests and the benchmarks. The parent
spawns one process per rank (``multiprocessing`` "spawn" context), each of
which runs a named top-level ``worker(ctx, *args)`` function and sends back
either its return value or the exception it raised. The parent bounds every
rank and always kills and reaps every child, whatever happens, so a hung or
crashed rank fails the run instead of hanging it or leaking processes; a
child also dies with its parent when the parent is killed outright.

No rank runs its function before every rank has started (imported torch),
and the run's time bound starts then, not at the spawn: on a loaded machine
start-up alone can take many seconds, which must count neither against the
run's bound nor against the timeouts the ranks set themselves (a group's
rendezvous, say). Start-up has a bound of its own (``STARTUP_TIMEOUT_S``).

Rendezvous is fresh per run: ``ctx.init_method`` is a ``file://`` URL in a new
temporary directory, and ``ctx.store()`` returns a FileStore on a second file
for the ranks' own coordination. Return values travel by plain pickle
(tensors are copied by value), so keep them small: lists of failure strings,
numbers.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import os
import pickle
import shutil
import socket
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Callable, Collection, Optional, Sequence

__all__ = [
    "RankError",
    "RankResult",
    "WorkerContext",
    "MultiProcessError",
    "free_port",
    "run_workers",
    "run_workers_ok",
]

# A run's bound, from the moment its last rank started, unless the caller says otherwise.
DEFAULT_TIMEOUT_S = 120.0
# How long a rank may take from its spawn to having imported torch.
STARTUP_TIMEOUT_S = 120.0
# After one rank failed, how long the others get to report before they are killed.
FAILURE_GRACE_S = 15.0
# How long a rank may take to exit after it reported its result.
EXIT_GRACE_S = 20.0


_aux_store: Any = None


@dataclass(frozen=True)
class WorkerContext:
    """What a worker function knows about its run."""

    rank: int
    world_size: int
    # A fresh directory of the run's, shared by its ranks.
    tmp_dir: str

    @property
    def init_store_path(self) -> str:
        """The FileStore file init_process_group rendezvouses through."""
        return os.path.join(self.tmp_dir, "init_store")

    @property
    def init_method(self) -> str:
        return f"file://{self.init_store_path}"

    @property
    def aux_store_path(self) -> str:
        """A second fresh store file, for the ranks' own coordination."""
        return os.path.join(self.tmp_dir, "aux_store")

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


def _child_main(
    fn: Callable[..., Any],
    ctx: WorkerContext,
    args: tuple[Any, ...],
    env: dict[str, str],
    conn: multiprocessing.connection.Connection,
    parent_pid: int,
    stay_alive: bool,
) -> None:
    # "{rank}" in a value stands for the child's rank (a host name per rank, say).
    os.environ.update({name: value.replace("{rank}", str(ctx.rank)) for name, value in env.items()})
    import torch
    import torch.distributed as dist

    # After torch: torch_monarch imported before torch makes torch's backend entry point warn.
    from torch_monarch._lifetime import die_with_parent

    die_with_parent(parent_pid)

    # Ranks share few cores; intra-op threads would only fight each other
    # (a benchmark that wants more sets its own).
    torch.set_num_threads(1)
    conn.send_bytes(pickle.dumps(("started", None)))
    conn.recv_bytes()  # the parent's go, once every rank has started
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
    if stay_alive:
        threading.Event().wait()  # the parent kills this rank
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
    wait_for: Optional[Collection[int]] = None,
    stay_alive: bool = False,
) -> list[RankResult]:
    """Runs ``fn(ctx, *args)`` on ranks 0..world_size-1 and returns what each did.

    ``fn`` must be a module-level function (spawn pickles it by name);
    ``{rank}`` in an ``env`` value is replaced by the child's rank. The
    ranks start it together, once the last of them has started, and get
    ``timeout`` seconds from then.
    Never raises for a rank's failure; see ``run_workers_ok`` for the strict form.

    ``wait_for`` names the ranks whose reports end the run (default: all); the
    others (a rank stopped on purpose, say) are killed once those reported.
    With ``stay_alive`` the ranks skip their orderly teardown and wait to be
    killed, for runs whose teardown next to a dead peer is not what is measured.
    """
    mp = multiprocessing.get_context("spawn")
    tmp_dir = tempfile.mkdtemp(prefix="monarch-test-")
    child_env = {"OMP_NUM_THREADS": "1", **(env or {})}
    processes: list[multiprocessing.process.BaseProcess] = []
    pipes: list[multiprocessing.connection.Connection] = []
    results = [RankResult(rank=rank) for rank in range(world_size)]
    try:
        for rank in range(world_size):
            # Messages come up ("started", then the result); the go goes down.
            pipe, child_end = mp.Pipe(duplex=True)
            ctx = WorkerContext(rank, world_size, tmp_dir)
            process = mp.Process(
                target=_child_main,
                args=(fn, ctx, args, child_env, child_end, os.getpid(), stay_alive),
                name=f"rank{rank}",
                daemon=True,
            )
            process.start()
            child_end.close()
            processes.append(process)
            pipes.append(pipe)
        collector = _Collector(processes, pipes, results, timeout)
        collector.collect(set(range(world_size) if wait_for is None else wait_for))
        collector.note_unfinished()
        if not stay_alive:
            _await_exit(processes, results, time.monotonic() + EXIT_GRACE_S)
    finally:
        _kill_all(processes)
        for pipe in pipes:
            pipe.close()
        shutil.rmtree(tmp_dir, ignore_errors=True)
    for rank, process in enumerate(processes):
        results[rank].exit_code = process.exitcode
    return results


class _Collector:
    """Reads the ranks' messages ("started", then the result) against their bounds."""

    def __init__(
        self,
        processes: Sequence[multiprocessing.process.BaseProcess],
        pipes: Sequence[multiprocessing.connection.Connection],
        results: list[RankResult],
        timeout: float,
    ) -> None:
        self.processes = processes
        self.pipes = pipes
        self.results = results
        self.timeout = timeout
        self.spawned = time.monotonic()
        self.starting = set(range(len(processes)))
        # When the last rank started (or ended before it did): the run's clock.
        self.run_start: Optional[float] = None
        self.first_failure: Optional[float] = None
        # Ranks whose story is told: reported, died or ran out of time.
        self.complete: set[int] = set()

    def deadline(self) -> float:
        if self.run_start is None:
            return self.spawned + STARTUP_TIMEOUT_S
        bound = self.run_start + self.timeout
        if self.first_failure is not None:
            # Peers of a failed rank may block until their op timeout; give
            # them a bounded while, from when it applies, to report their view.
            bound = min(bound, max(self.run_start, self.first_failure) + FAILURE_GRACE_S)
        return bound

    def _started(self, rank: int) -> None:
        self.starting.discard(rank)
        if not self.starting and self.run_start is None:
            self.run_start = time.monotonic()
            for pipe in self.pipes:
                try:
                    pipe.send_bytes(b"go")
                except OSError:
                    pass  # a rank that already ended

    def collect(self, pending: set[int]) -> None:
        """Until every rank in ``pending`` reported, died or ran out of time."""
        pipe_rank = {id(pipe): rank for rank, pipe in enumerate(self.pipes)}
        sentinel_rank = {process.sentinel: rank for rank, process in enumerate(self.processes)}
        while pending:
            now = time.monotonic()
            if now >= self.deadline():
                for rank in sorted(pending):
                    if rank in self.starting:
                        self.results[rank].problem = f"did not start within {STARTUP_TIMEOUT_S:.0f} s"
                    else:
                        self.results[rank].problem = "did not report within the time bound (hung?)"
                    self.complete.add(rank)
                return
            # The start-up of ranks not waited for still sets the run's clock.
            watched = pending | self.starting
            waitables: list[Any] = [self.pipes[rank] for rank in watched]
            waitables += [self.processes[rank].sentinel for rank in pending]
            timeout = self.deadline() - now
            for ready in multiprocessing.connection.wait(waitables, timeout=timeout):
                is_pipe = isinstance(ready, multiprocessing.connection.Connection)
                rank = pipe_rank[id(ready)] if is_pipe else sentinel_rank[ready]
                if rank in self.complete or rank not in watched:
                    continue  # its pipe and its sentinel were both ready
                complete = self._read(rank, exited=not is_pipe)
                if rank in pending and complete:
                    self._done(rank, pending)
                elif rank not in pending:
                    self._started(rank)  # its start-up was all that was watched
                    if complete:
                        self.complete.add(rank)

    def note_unfinished(self) -> None:
        """Reads what the ranks not waited for had reported by now, if anything."""
        for rank, pipe in enumerate(self.pipes):
            if rank in self.complete:
                continue
            result = self.results[rank]
            while pipe.poll():
                message = _receive(pipe, result)
                if message is None:
                    break  # it died; the problem is noted
                if message[0] != "started":
                    _store(message, result)
                    break
            else:
                result.problem = "not waited for: killed before it reported"

    def _read(self, rank: int, exited: bool) -> bool:
        """Reads what the rank sent; True once its story is complete."""
        pipe, result = self.pipes[rank], self.results[rank]
        # A rank that exited may still have its messages in the pipe.
        while not exited or pipe.poll():
            message = _receive(pipe, result)
            if message is None:
                return True
            if message[0] != "started":
                _store(message, result)
                return True
            self._started(rank)
            if not exited and not pipe.poll():
                return False
        result.problem = "exited without reporting a result (crashed?)"
        return True

    def _done(self, rank: int, pending: set[int]) -> None:
        pending.discard(rank)
        self.complete.add(rank)
        self._started(rank)  # a rank that ended no longer holds up the run's start
        if not self.results[rank].ok and self.first_failure is None:
            self.first_failure = time.monotonic()


def _receive(pipe: multiprocessing.connection.Connection, result: RankResult) -> Optional[tuple[str, Any]]:
    """The next message, or None (and the problem noted) when the pipe ended."""
    try:
        status, value = pickle.loads(pipe.recv_bytes())
    except EOFError:
        result.problem = "exited without reporting a result (crashed?)"
        return None
    except OSError as error:
        result.problem = f"result pipe broke: {error!r}"
        return None
    return (status, value)


def _store(message: tuple[str, Any], result: RankResult) -> None:
    status, value = message
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
