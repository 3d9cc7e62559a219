"""Spawning ranks for the failure benchmarks, where some ranks are meant to die.

``run_all_ranks(fn, world_size, config, timeout_s, env)`` starts one process
per rank (through ``_harness.spawn_ranks``), each running the module-level
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
import shutil
import sys
import tempfile
import threading
import time
from typing import Any, Callable, Optional

from _harness import RankContext, exit_when_orphaned, kill_and_reap, read_report, report_result, spawn_ranks

__all__ = ["Outcome", "run_all_ranks"]

Outcome = tuple[str, Any]


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
    import torch

    torch.set_num_threads(1)
    report_result(fn, ctx, config, conn)
    sys.stdout.flush()
    sys.stderr.flush()
    # No teardown: the parent kills every rank once all have reported, so a
    # backend that cannot shut down next to a dead peer does not stall the run.
    threading.Event().wait()


def run_all_ranks(
    fn: Callable[[RankContext, Any], Any],
    world_size: int,
    config: Any,
    timeout_s: float,
    env: Optional[dict[str, str]] = None,
    wait_for: Optional[set[int]] = None,
) -> list[Outcome]:
    tmp_dir = tempfile.mkdtemp(prefix="monarch-faultbench-")
    processes: list[multiprocessing.process.BaseProcess] = []
    readers: list[multiprocessing.connection.Connection] = []
    outcomes: list[Outcome] = [("no report", f"nothing within {timeout_s:.0f} s")] * world_size
    try:
        processes, readers = spawn_ranks(
            _child_main, fn, world_size, config, {"OMP_NUM_THREADS": "1", **(env or {})}, tmp_dir
        )
        pending = set(range(world_size)) if wait_for is None else set(wait_for)
        _collect(processes, readers, outcomes, pending, time.monotonic() + timeout_s)
    finally:
        kill_and_reap(processes)
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
            report = read_report(readers[rank])
            if report is not None:
                outcomes[rank] = report
                continue
            processes[rank].join(1.0)
            outcomes[rank] = ("died", processes[rank].exitcode)
