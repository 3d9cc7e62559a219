"""A rank that stays alive (heartbeats flowing) but skips an op: the ranks in
the op raise CollectiveTimeoutError naming it within ±1 s of the op timeout;
the skipper's own later call fails at once instead of joining a dead op; the
other groups are unaffected; the ranks that were in the op shrink the group
past the skipper, on the links they hold, and go on; nothing leaks."""

from __future__ import annotations

import logging
import re
from datetime import timedelta
from typing import Any

import torch.distributed as dist

from fault_workload import run_mix, run_op
from faults import C10D_TIMEOUT_PATTERN, assert_no_problems, attempt, backend_of, settled_baseline, teardown_leaks
from multiproc import WorkerContext, run_workers

logger = logging.getLogger(__name__)

OP_TIMEOUT_S = 3.0
TOLERANCE_S = 1.0
SKIPPER = 2
STORE_WAIT = timedelta(seconds=60)


def timeout_worker(ctx: WorkerContext) -> dict[str, Any]:
    baseline = settled_baseline()
    ctx.init("monarch", timeout=timedelta(seconds=60))
    store = ctx.store()
    group = dist.new_group(backend="monarch", timeout=timedelta(seconds=OP_TIMEOUT_S))
    run_op("all_reduce", 0, group)
    problems: list[str] = []
    result: dict[str, Any] = {}
    if ctx.rank != SKIPPER:
        outcome = attempt(lambda: run_op("all_reduce", 1, group))
        result["elapsed_s"] = outcome.elapsed_s
        result["message"] = outcome.message[:300]
        if not outcome.is_a("CollectiveTimeoutError") or outcome.failed_ranks != (SKIPPER,):
            problems.append(f"expected CollectiveTimeoutError naming [{SKIPPER}], {outcome.describe()}")
        if abs(outcome.elapsed_s - OP_TIMEOUT_S) > TOLERANCE_S:
            problems.append(f"timed out after {outcome.elapsed_s:.3f} s, op timeout {OP_TIMEOUT_S} s ± {TOLERANCE_S} s")
        if "sequence number" not in outcome.message or "allreduce" not in outcome.message:
            problems.append(f"the message names neither the op nor its sequence number: {outcome.message}")
        if not re.search(C10D_TIMEOUT_PATTERN, outcome.message) or f"ranks [{SKIPPER}]" not in outcome.message:
            problems.append(f"c10d's timeout pattern or the skipper's rank not in the message: {outcome.message}")
        store.set(f"timed_out/{ctx.rank}", "1")
    else:
        # Alive and heartbeating, just late: the op is over by the time it comes.
        store.wait([f"timed_out/{r}" for r in range(ctx.world_size) if r != SKIPPER], STORE_WAIT)
        late = attempt(lambda: run_op("all_reduce", 1, group))
        result["late"] = late.describe()
        if late.ok or not late.is_a("DistBackendError") or late.elapsed_s > 1.0:
            problems.append(f"the skipper's late op {late.describe()}")
    if backend_of(group).error_info() is None:
        problems.append("the group does not report itself broken")
    # Other groups are unaffected.
    run_op("all_reduce", 2)
    if ctx.rank != SKIPPER:
        before = backend_of(group).connection_count()
        shrunk = dist.shrink_group([SKIPPER], group=group)
        after = backend_of(shrunk).connection_count()
        if after != before:
            problems.append(f"shrink_group changed the connection count: {before} before, {after} after")
        run_mix(5, 6, problems, "on the shrunk group", shrunk)
        del shrunk
    del group
    dist.barrier()
    problems += teardown_leaks(baseline)
    result["problems"] = problems
    return result


def test_skipped_op_times_out_naming_the_skipper() -> None:
    reports = assert_no_problems(run_workers(timeout_worker, 3, timeout=120))
    for rank, report in enumerate(reports):
        logger.info("rank %d: %s", rank, {k: v for k, v in report.items() if k != "problems"})
