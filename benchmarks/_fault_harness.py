"""Spawning ranks for the failure benchmarks, where some ranks are meant to die.

``run_all_ranks(fn, world_size, config, timeout_s, env)`` starts one process
per rank (``multiprocessing`` "spawn"), each running the module-level
``fn(ctx, config)``, and returns every rank's outcome: ("ok", value),
("error", traceback text), ("died", exit code) or ("no report", reason).
Unlike ``_harness.run_ranks`` a rank that dies or never reports is an
outcome, not an error: it is what these benchmarks do on purpose. When the
ranks in ``wait_for`` (default: all) have reported or died, or ``timeout_s``
has passed, every child still alive (stopped ones included) is killed and
reaped, whatever happened.
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
from typing import Any, Callable, Optional

__all__ = ["FaultRankContext", "Outcome", "run_all_ranks"]

_ORPHAN_POLL_S = 1.0

Outcome = tuple[str, Any]


@dataclass(frozen=True)
class FaultRankContext:
    rank: int
    world_size: int
    tmp_dir: str

    @property
    def init_method(self) -> str:
        return f"file://{os.path.join(self.tmp_dir, 'store')}"

    @property
    def aux_store_path(self) -> str:
        return os.path.join(self.tmp_dir, "aux_store")


def _child_main(
    fn: Callable[[FaultRankContext, Any], Any],
    ctx: FaultRankContext,
    config: Any,
    env: dict[str, str],
    parent_pid: int,
    conn: multiprocessing.connection.Connection,
) -> None:
    os.environ.update(env)

    def watch_parent() -> None:
        while os.getppid() == parent_pid:
            time.sleep(_ORPHAN_POLL_S)
        os._exit(1)

    threading.Thread(target=watch_parent, name="orphan-watch", daemon=True).start()
    import torch

    torch.set_num_threads(1)
    try:
        payload: Outcome = ("ok", fn(ctx, config))
    except BaseException:  # noqa: BLE001 - everything goes back to the parent
        payload = ("error", traceback.format_exc())
    conn.send_bytes(pickle.dumps(payload))
    conn.close()
    sys.stdout.flush()
    sys.stderr.flush()
    # No teardown: the parent kills every rank once all have reported, so a
    # backend that cannot shut down next to a dead peer does not stall the run.
    threading.Event().wait()


def run_all_ranks(
    fn: Callable[[FaultRankContext, Any], Any],
    world_size: int,
    config: Any,
    timeout_s: float,
    env: Optional[dict[str, str]] = None,
    wait_for: Optional[set[int]] = None,
) -> list[Outcome]:
    mp = multiprocessing.get_context("spawn")
    tmp_dir = tempfile.mkdtemp(prefix="monarch-faultbench-")
    processes: list[multiprocessing.process.BaseProcess] = []
    readers: list[multiprocessing.connection.Connection] = []
    outcomes: list[Outcome] = [("no report", f"nothing within {timeout_s:.0f} s")] * world_size
    child_env = {"OMP_NUM_THREADS": "1", **(env or {})}
    try:
        for rank in range(world_size):
            reader, writer = mp.Pipe(duplex=False)
            ctx = FaultRankContext(rank, world_size, tmp_dir)
            process = mp.Process(
                target=_child_main, args=(fn, ctx, config, child_env, os.getpid(), writer), name=f"rank{rank}", daemon=True
            )
            process.start()
            writer.close()
            processes.append(process)
            readers.append(reader)
        pending = set(range(world_size)) if wait_for is None else set(wait_for)
        _collect(processes, readers, outcomes, pending, time.monotonic() + timeout_s)
    finally:
        for process in processes:
            if process.exitcode is None:
                process.kill()
        for process in processes:
            process.join(10.0)
        for reader in readers:
            reader.close()
        shutil.rmtree(tmp_dir, ignore_errors=True)
    return outcomes


def _collect(
    processes: list[multiprocessing.process.BaseProcess],
    readers: list[multiprocessing.connection.Connection],
    outcomes: list[Outcome],
    pending: set[int],
    deadline: float,
) -> None:
    by_reader = {id(reader): rank for rank, reader in enumerate(readers)}
    by_sentinel = {process.sentinel: rank for rank, process in enumerate(processes)}
    while pending and time.monotonic() < deadline:
        waitables: list[Any] = [readers[r] for r in pending] + [processes[r].sentinel for r in pending]
        for ready in multiprocessing.connection.wait(waitables, timeout=max(0.0, deadline - time.monotonic())):
            is_pipe = isinstance(ready, multiprocessing.connection.Connection)
            rank = by_reader[id(ready)] if is_pipe else by_sentinel[ready]
            if rank not in pending:
                continue
            pending.discard(rank)
            try:
                if readers[rank].poll():
                    outcomes[rank] = pickle.loads(readers[rank].recv_bytes())
                    continue
            except (EOFError, OSError):
                pass
            processes[rank].join(1.0)
            outcomes[rank] = ("died", processes[rank].exitcode)
