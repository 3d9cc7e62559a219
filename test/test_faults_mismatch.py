"""A size mismatch in a fault-injection setting, in the allreduce and every
rooted op (test_mismatch.py covers the kinds of mismatch): every rank raises
CollectiveMismatchError well before the op timeout -- a rooted op's pure
senders from their next op -- naming ranks, both sizes and the sequence
number; the group stays broken and says so; a new group over the same ranks
works; nothing leaks."""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

import pytest
import torch
import torch.distributed as dist

from fault_workload import run_mix, run_op
from faults import assert_no_problems, attempt, backend_of, settled_baseline, teardown_leaks
from multiproc import WorkerContext, run_workers

logger = logging.getLogger(__name__)

GROUP_TIMEOUT = timedelta(seconds=10)
MISMATCH_BOUND_S = 2.0
ODD_RANK = 0


ROOT = 1


def _call(op: str, tensor: torch.Tensor, rank: int, group: Any) -> None:
    """``op`` on ``tensor`` at this rank; the rooted ops name rank ROOT."""
    if op == "all_reduce":
        dist.all_reduce(tensor, group=group)
    elif op == "broadcast":
        dist.broadcast(tensor, src=ROOT, group=group)
    elif op == "reduce":
        dist.reduce(tensor, dst=ROOT, group=group)
    elif op == "gather":
        outputs = [torch.empty_like(tensor) for _ in range(group.size())] if rank == ROOT else None
        dist.gather(tensor, gather_list=outputs, dst=ROOT, group=group)
    elif op == "scatter":
        inputs = [tensor.clone() for _ in range(group.size())] if rank == ROOT else None
        dist.scatter(tensor, scatter_list=inputs, src=ROOT, group=group)
    else:
        raise ValueError(op)


def mismatch_worker(ctx: WorkerContext, op: str, count: int) -> dict[str, Any]:
    baseline = settled_baseline()
    ctx.init("monarch", timeout=timedelta(seconds=60))
    group = dist.new_group(backend="monarch", timeout=GROUP_TIMEOUT)
    run_op("all_reduce", 0, group)
    mine = count + (1 if ctx.rank == ODD_RANK else 0)
    tensor = torch.full((mine,), float(ctx.rank + 1))
    mismatched = attempt(lambda: _call(op, tensor, ctx.rank, group))
    problems: list[str] = []
    # A rank that had done its part (a pure sender) raises from its next op.
    outcome = mismatched if not mismatched.ok else attempt(lambda: run_op("all_reduce", 1, group))
    if not outcome.is_a("CollectiveMismatchError") or outcome.elapsed_s > MISMATCH_BOUND_S:
        problems.append(f"expected CollectiveMismatchError within {MISMATCH_BOUND_S} s, {outcome.describe()}")
    if mismatched.ok and op in ("all_reduce", "broadcast", "scatter") and ctx.rank == ODD_RANK:
        problems.append(f"the odd rank waits for data in {op}, yet its op returned")
    # The rank that detected the mismatch names the rank(s) it disagreed with;
    # the others get its notice verbatim (so rank 0 may read [0]).
    if not outcome.failed_ranks or not set(outcome.failed_ranks) <= set(range(ctx.world_size)):
        problems.append(f"failed_ranks {outcome.failed_ranks} should name a side of the mismatch")
    for text in ("mismatch", "sequence number", f"count={count}", f"count={count + 1}"):
        if text not in outcome.message:
            problems.append(f"message lacks {text!r}: {outcome.message}")
    info = backend_of(group).error_info()
    if info is None or info[0] != "collective mismatch":
        problems.append(f"error_info() after the mismatch: {info!r}")
    later = attempt(lambda: run_op("all_reduce", 1, group))
    if not later.is_a("CollectiveMismatchError") or later.elapsed_s > 0.5:
        problems.append(f"an op on the broken group {later.describe()}")
    # The same ranks start over on a new group.
    fresh = dist.new_group(backend="monarch", timeout=GROUP_TIMEOUT)
    run_mix(11, 6, problems, "on a new group", fresh)
    del group, fresh
    dist.barrier()
    problems += teardown_leaks(baseline)
    return {"outcome": outcome.describe(), "problems": problems}


@pytest.mark.parametrize("count", [10, 300_000], ids=["small", "large"])
@pytest.mark.parametrize("op", ["all_reduce", "broadcast", "reduce", "gather", "scatter"])
def test_size_mismatch(op: str, count: int) -> None:
    """In the rooted ops the odd rank is a pure sender (gather, reduce) or
    receiver (broadcast, scatter), and the root one of the agreeing ranks."""
    reports = assert_no_problems(run_workers(mismatch_worker, 3, op, count, timeout=120))
    for rank, report in enumerate(reports):
        logger.info("rank %d: %s", rank, report["outcome"])
