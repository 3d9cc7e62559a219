"""Timing shared by the benchmarks in this directory.

``time_ops`` times N back-to-back asynchronous ops plus the final waits with
``time.perf_counter`` and returns the slowest rank's elapsed time, so that one
measurement is what the whole group took. ``time_each_op`` times the same N
ops waited on one at a time: an op's latency, which back-to-back ops hide
behind the issuing of the next ones, and the slowest of those ops.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable

__all__ = ["EachOp", "time_each_op", "time_ops"]


def _max_across_ranks(*values: float, group: Any) -> list[float]:
    """Each of ``values``' maximum over the ranks of ``group`` (a CPU/gloo group), in one all-reduce."""
    import torch
    import torch.distributed as dist

    t = torch.tensor(values, dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
    return [float(v) for v in t.tolist()]


def _elapsed(run: Callable[[], None], control_group: Any) -> float:
    """This rank's seconds in ``run()``, started by all ranks together (a barrier on ``control_group``)."""
    import torch.distributed as dist

    dist.barrier(group=control_group)
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def time_ops(issue: Callable[[], Any], iterations: int, control_group: Any, sync: Callable[[], None]) -> float:
    """Seconds per op: ``iterations`` back-to-back ``issue()`` calls and their waits.

    ``issue`` starts one asynchronous op and returns its Work. All ranks start
    together (a barrier on ``control_group``), the clock runs until every Work
    has completed and ``sync()`` (e.g. a device synchronize) returned, and the
    result is the slowest rank's time divided by ``iterations``.
    """

    def run() -> None:
        works = [issue() for _ in range(iterations)]
        for work in works:
            work.wait()
        sync()

    [elapsed] = _max_across_ranks(_elapsed(run, control_group), group=control_group)
    return elapsed / iterations


@dataclass(frozen=True)
class EachOp:
    """Ops waited on one at a time: seconds per op, and the slowest single op."""

    seconds_per_op: float
    # The longest any rank waited for one op (issue to wait's return): a
    # stall of a few ops shows here, where the time per op averages it away.
    slowest_op: float


def time_each_op(issue: Callable[[], Any], iterations: int, control_group: Any, sync: Callable[[], None]) -> EachOp:
    """``iterations`` ops, each waited on (and ``sync()``) before the next is issued.

    What a caller that needs each result at once (a loss, a gradient norm)
    waits. All ranks start together; the time per op is the mean of the ops'
    own times (issue to wait's return, ``sync()`` included), the slowest
    rank's, so that it never exceeds the slowest op: time between two ops (a
    garbage collection in Python) counts in neither.
    """
    import torch.distributed as dist

    dist.barrier(group=control_group)
    total = 0.0
    slowest = 0.0
    for _ in range(iterations):
        start = time.perf_counter()
        issue().wait()
        sync()
        took = time.perf_counter() - start
        total += took
        slowest = max(slowest, took)
    mean, slowest_anywhere = _max_across_ranks(total / iterations, slowest, group=control_group)
    return EachOp(mean, slowest_anywhere)
