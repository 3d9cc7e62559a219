"""abort() from another thread completes every pending op with AbortedError
within 0.2 s, also when a peer is hung; the peers learn that the aborting
rank is gone (PeerFailureError naming it), shrink past it and go on; and
nothing leaks on either side, nor does destroy_process_group hang."""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from datetime import timedelta
from typing import Any, Callable

import pytest
import torch
import torch.distributed as dist

from fault_workload import run_mix, run_op
from faults import (
    assert_no_problems,
    Outcome,
    attempt,
    kill_and_wait,
    process_state,
    settled_baseline,
    teardown_leaks,
    wait_until,
)
from monarch_groups import transport_env
from multiproc import WorkerContext, run_workers
from rdma_support import requires_rdma

logger = logging.getLogger(__name__)

ABORT_BOUND_S = 0.2
OP_TIMEOUT = timedelta(seconds=30)
STORE_WAIT = timedelta(seconds=60)


def _abort_pending(abort: Callable[[], None]) -> tuple[list[Outcome], float]:
    """Issues two ops nobody else joins (one running, one queued), aborts from
    another thread, and returns how each wait() ended and when abort() began."""
    works = [
        dist.all_reduce(torch.ones(1000), async_op=True),
        dist.broadcast(torch.ones(10), src=0, async_op=True),
    ]
    abort_started: list[float] = []

    def aborter() -> None:
        abort_started.append(time.monotonic())
        abort()

    thread = threading.Thread(target=aborter, name="aborter")
    thread.start()
    outcomes = [attempt(work.wait) for work in works]  # type: ignore[union-attr]
    thread.join(10)
    assert not thread.is_alive(), "abort() did not return"
    return outcomes, abort_started[0]


def _check_aborted(outcomes: list[Outcome], abort_started: float, problems: list[str]) -> list[float]:
    latencies = []
    for index, outcome in enumerate(outcomes):
        latency = outcome.ended - abort_started
        latencies.append(latency)
        if not outcome.is_a("AbortedError") or not outcome.is_a("DistBackendError"):
            problems.append(f"pending op {index}: expected AbortedError, {outcome.describe()}")
        if latency > ABORT_BOUND_S:
            problems.append(f"pending op {index}: raised {latency:.3f} s after abort() (bound {ABORT_BOUND_S} s)")
    return latencies


def abort_worker(ctx: WorkerContext) -> dict[str, Any]:
    """Rank 0 aborts with two ops pending; ranks 1 and 2 are alive but never
    join them, then find the group broken, naming rank 0, and shrink past it."""
    baseline = settled_baseline()
    ctx.init("monarch", timeout=OP_TIMEOUT)
    store = ctx.store()
    run_op("all_reduce", 0)
    problems: list[str] = []
    result: dict[str, Any] = {}
    if ctx.rank == 0:
        outcomes, abort_started = _abort_pending(dist.group.WORLD.abort)
        result["abort_latency_s"] = _check_aborted(outcomes, abort_started, problems)
        later = attempt(lambda: run_op("all_reduce", 1))
        if later.ok or later.elapsed_s > ABORT_BOUND_S:
            problems.append(f"an op after abort() {later.describe()}")
        store.set("aborted", "1")
    else:
        store.wait(["aborted"], STORE_WAIT)
        # The aborting rank told us, or its links closed: either way it is gone.
        noticed = attempt(lambda: run_op("all_reduce", 1))
        if not noticed.is_a("PeerFailureError") or noticed.failed_ranks != (0,) or noticed.elapsed_s > 1.0:
            problems.append(f"rank {ctx.rank}: expected PeerFailureError naming [0] at once, {noticed.describe()}")
        dist.shrink_group([0])
        run_mix(3, 6, problems, f"rank {ctx.rank}: after shrinking")
        if not problems:
            dist.barrier()
    problems += teardown_leaks(baseline)
    result["problems"] = problems
    return result


def abort_hung_peer_worker(ctx: WorkerContext) -> dict[str, Any]:
    """Rank 1 is stopped (hung); rank 0 aborts with an op pending on it."""
    baseline = settled_baseline()
    ctx.init("monarch", timeout=OP_TIMEOUT)
    store = ctx.store()
    store.set(f"pid/{ctx.rank}", str(os.getpid()))
    run_op("all_reduce", 0)
    if ctx.rank == 1:
        os.kill(os.getpid(), signal.SIGSTOP)
        raise AssertionError("a stopped rank is killed, never resumed")
    hung = int(store.get("pid/1"))
    wait_until(lambda: process_state(hung) == "T", 30, "rank 1 to be stopped")
    problems: list[str] = []
    try:
        outcomes, abort_started = _abort_pending(dist.distributed_c10d._abort_process_group)
        latencies = _check_aborted(outcomes, abort_started, problems)
        # Never hangs on the hung peer, and leaves nothing behind.
        started = time.monotonic()
        problems += teardown_leaks(baseline)
        teardown_s = time.monotonic() - started
    finally:
        kill_and_wait(hung)
    return {"abort_latency_s": latencies, "teardown_s": teardown_s, "problems": problems}


TRANSPORTS = ["auto", pytest.param("rdma", marks=requires_rdma)]


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_abort_from_another_thread_fails_pending_ops(transport: str) -> None:
    results = run_workers(abort_worker, 3, timeout=120, env=transport_env(transport))
    reports = assert_no_problems(results)
    logger.info("abort -> AbortedError: %s s", [f"{s:.4f}" for s in reports[0]["abort_latency_s"]])


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_abort_with_a_hung_peer(transport: str) -> None:
    # A heartbeat timeout far above the test: only abort() can end the op.
    env = {**transport_env(transport), "MONARCH_HEARTBEAT_TIMEOUT": "60"}
    results = run_workers(abort_hung_peer_worker, 2, timeout=120, env=env)
    assert results[1].exit_code == -signal.SIGKILL, results[1]
    reports = assert_no_problems(results, skip={1})
    logger.info(
        "abort with a hung peer -> AbortedError: %s s; teardown %.3f s",
        [f"{s:.4f}" for s in reports[0]["abort_latency_s"]], reports[0]["teardown_s"],
    )
