"""Process spawning and timing shared by the benchmarks in this directory.

``run_ranks(fn, world_size, config)`` starts one process per rank (the
``multiprocessing`` "spawn" context), each running the module-level
``fn(ctx, config)``, and returns rank 0's return value. Rendezvous is a
``FileStore`` in a fresh temporary directory. Whatever happens (a rank raises,
crashes, hangs past the time bound, or the parent is interrupted), every
child is killed and reaped before ``run_ranks`` returns or raises, and a child
whose parent disappears exits by itself.

``time_ops`` times N back-to-back asynchronous ops plus the final waits with
``time.perf_counter`` and returns the slowest rank's elapsed time, so that one
measurement is what the whole group took.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import os
import pickle
import shutil
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

__all__ = [
    "RankContext",
    "RanksFailedError",
    "exit_when_orphaned",
    "kill_and_reap",
    "max_across_ranks",
    "read_report",
    "report_result",
    "run_ranks",
    "spawn_ranks",
    "time_ops",
]

# How long the other ranks get to report once one rank failed.
_FAILURE_GRACE_S = 10.0
# How long a rank may take to exit after it reported.
_EXIT_GRACE_S = 20.0
# How often a child checks that its parent is still alive.
_ORPHAN_POLL_S = 1.0


@dataclass(frozen=True)
class RankContext:
    """What a rank knows about its run: a temporary directory of its own."""

    rank: int
    world_size: int
    tmp_dir: str

    @property
    def store_path(self) -> str:
        """The FileStore the ranks rendezvous through."""
        return os.path.join(self.tmp_dir, "store")

    @property
    def init_method(self) -> str:
        return f"file://{self.store_path}"

    @property
    def aux_store_path(self) -> str:
        """A second FileStore, for the benchmark's own coordination."""
        return os.path.join(self.tmp_dir, "aux_store")


class RanksFailedError(RuntimeError):
    """Some rank raised, crashed or hung; the message has every rank's story."""


def run_ranks(
    fn: Callable[[RankContext, Any], Any],
    world_size: int,
    config: Any,
    timeout_s: float,
    env: Optional[dict[str, str]] = None,
) -> Any:
    """Runs ``fn(ctx, config)`` on ranks 0..world_size-1; returns rank 0's value.

    Raises ``RanksFailedError`` if any rank fails or the run exceeds
    ``timeout_s``. Children are always killed and reaped.
    """
    tmp_dir = tempfile.mkdtemp(prefix="monarch-bench-")
    processes: list[multiprocessing.process.BaseProcess] = []
    readers: list[multiprocessing.connection.Connection] = []
    try:
        processes, readers = spawn_ranks(_child_main, fn, world_size, config, dict(env or {}), tmp_dir)
        outcomes = _collect(processes, readers, time.monotonic() + timeout_s)
        if all(status == "ok" for status, _ in outcomes):
            # Let them tear down in order; whatever is left is killed below.
            exit_deadline = time.monotonic() + _EXIT_GRACE_S
            for process in processes:
                process.join(max(0.0, exit_deadline - time.monotonic()))
    finally:
        kill_and_reap(processes)
        for reader in readers:
            reader.close()
        shutil.rmtree(tmp_dir, ignore_errors=True)
    failures = [f"rank {rank}: {outcome[1]}" for rank, outcome in enumerate(outcomes) if outcome[0] != "ok"]
    if failures:
        raise RanksFailedError("benchmark ranks failed:\n" + "\n".join(failures))
    return outcomes[0][1]


def spawn_ranks(
    child_main: Callable[..., None],
    fn: Callable[[RankContext, Any], Any],
    world_size: int,
    config: Any,
    env: dict[str, str],
    tmp_dir: str,
) -> tuple[list[multiprocessing.process.BaseProcess], list[multiprocessing.connection.Connection]]:
    """Starts ``child_main(fn, ctx, config, env, parent_pid, conn)`` per rank
    ("spawn" context); returns the processes and the ends their reports come on."""
    mp = multiprocessing.get_context("spawn")
    processes: list[multiprocessing.process.BaseProcess] = []
    readers: list[multiprocessing.connection.Connection] = []
    for rank in range(world_size):
        reader, writer = mp.Pipe(duplex=False)
        process = mp.Process(
            target=child_main,
            args=(fn, RankContext(rank, world_size, tmp_dir), config, env, os.getpid(), writer),
            name=f"bench-rank{rank}",
            daemon=True,
        )
        process.start()
        writer.close()
        processes.append(process)
        readers.append(reader)
    return processes, readers


def report_result(
    fn: Callable[[RankContext, Any], Any], ctx: RankContext, config: Any, conn: multiprocessing.connection.Connection
) -> None:
    """Child side: runs ``fn`` and sends ("ok", value) or ("error", traceback)."""
    try:
        payload: tuple[str, Any] = ("ok", fn(ctx, config))
    except BaseException:  # noqa: BLE001 - everything goes back to the parent
        payload = ("error", traceback.format_exc())
    conn.send_bytes(pickle.dumps(payload))
    conn.close()


def read_report(reader: multiprocessing.connection.Connection) -> Optional[tuple[str, Any]]:
    """Parent side: what a rank sent, or None when it sent nothing."""
    try:
        if reader.poll():
            status, value = pickle.loads(reader.recv_bytes())
            return (status, value)
    except (EOFError, OSError):
        pass
    return None


def _child_main(
    fn: Callable[[RankContext, Any], Any],
    ctx: RankContext,
    config: Any,
    env: dict[str, str],
    parent_pid: int,
    conn: multiprocessing.connection.Connection,
) -> None:
    os.environ.update(env)
    exit_when_orphaned(parent_pid)
    report_result(fn, ctx, config, conn)
    try:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()


def exit_when_orphaned(parent_pid: int) -> None:
    """Starts a daemon thread that ends this process if its parent goes away."""

    def watch() -> None:
        while True:
            time.sleep(_ORPHAN_POLL_S)
            if os.getppid() != parent_pid:
                os._exit(1)

    threading.Thread(target=watch, name="orphan-watch", daemon=True).start()


def _collect(
    processes: Sequence[multiprocessing.process.BaseProcess],
    readers: Sequence[multiprocessing.connection.Connection],
    deadline: float,
) -> list[tuple[str, Any]]:
    """Reads each rank's (status, value) until all reported, one failed, or time is up."""
    outcomes: list[tuple[str, Any]] = [("pending", "did not report (hung?)")] * len(processes)
    pending = set(range(len(processes)))
    by_reader = {id(reader): rank for rank, reader in enumerate(readers)}
    by_sentinel = {process.sentinel: rank for rank, process in enumerate(processes)}
    while pending:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            for rank in pending:
                outcomes[rank] = ("timeout", "did not finish within the time bound (hung?)")
            break
        waitables: list[Any] = [readers[rank] for rank in pending] + [processes[rank].sentinel for rank in pending]
        for ready in multiprocessing.connection.wait(waitables, timeout=remaining):
            is_pipe = isinstance(ready, multiprocessing.connection.Connection)
            rank = by_reader[id(ready)] if is_pipe else by_sentinel[ready]
            if rank not in pending:
                continue
            pending.discard(rank)
            outcomes[rank] = _read_outcome(readers[rank], processes[rank])
            if outcomes[rank][0] != "ok":
                # The others are probably stuck in a collective with this rank.
                deadline = min(deadline, time.monotonic() + _FAILURE_GRACE_S)
    return outcomes


def _read_outcome(
    reader: multiprocessing.connection.Connection, process: multiprocessing.process.BaseProcess
) -> tuple[str, Any]:
    report = read_report(reader)
    if report is not None:
        return report
    process.join(1.0)
    return ("crashed", f"exited with code {process.exitcode} without reporting")


def kill_and_reap(processes: Sequence[multiprocessing.process.BaseProcess]) -> None:
    for process in processes:
        if process.exitcode is None:
            process.kill()
    for process in processes:
        process.join(10.0)
        if process.exitcode is None:
            print(f"warning: could not reap {process.name} (pid {process.pid})", file=sys.stderr)


def max_across_ranks(value: float, group: Any) -> float:
    """The maximum of ``value`` over the ranks of ``group`` (a CPU/gloo group)."""
    import torch
    import torch.distributed as dist

    t = torch.tensor([value], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
    return float(t.item())


def time_ops(issue: Callable[[], Any], iterations: int, control_group: Any, sync: Callable[[], None]) -> float:
    """Seconds per op: ``iterations`` back-to-back ``issue()`` calls and their waits.

    ``issue`` starts one asynchronous op and returns its Work. All ranks start
    together (a barrier on ``control_group``), the clock runs until every Work
    has completed and ``sync()`` (e.g. a device synchronize) returned, and the
    result is the slowest rank's time divided by ``iterations``.
    """
    import torch.distributed as dist

    dist.barrier(group=control_group)
    start = time.perf_counter()
    works = [issue() for _ in range(iterations)]
    for work in works:
        work.wait()
    sync()
    elapsed = time.perf_counter() - start
    return max_across_ranks(elapsed, control_group) / iterations
