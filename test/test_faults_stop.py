"""SIGSTOP a rank: a hung peer closes no socket, so only heartbeats can tell.

With ``MONARCH_HEARTBEAT_TIMEOUT=2`` every survivor must raise
PeerFailureError naming the stopped rank within heartbeat + 1 s of the stop
(measured from a stamp the victim writes just before it stops itself), both
when the survivors are blocked in an op with it ("busy") and when nobody is
in an op ("idle": the group must notice by itself, ``error_info()`` turns
non-None). Then one survivor SIGKILLs the stopped rank (cleanup), the
survivors shrink and go on, and nothing leaks.
"""

from __future__ import annotations

import logging
import os
import signal
from datetime import timedelta
from typing import Any

import pytest
import torch.distributed as dist

from fault_workload import op_sequence, run_mix, run_op
from faults import (
    assert_no_problems,
    Outcome,
    attempt,
    backend_of,
    kill_and_wait,
    read_stamp,
    settled_baseline,
    signal_self,
    teardown_leaks,
    wait_until,
)
from monarch_groups import transport_env
from multiproc import WorkerContext, run_workers
from rdma_support import requires_rdma

logger = logging.getLogger(__name__)

WORLD_SIZE = 4
VICTIM = 2
HEARTBEAT_S = 2.0
STOP_DETECT_BOUND_S = HEARTBEAT_S + 1.0
# Far above the heartbeat timeout: an op timeout must not be what fires.
OP_TIMEOUT = timedelta(seconds=30)
# The step of the op mix before which the victim stops ("busy" mode).
STOP_AT_STEP = 3


def _wait_for_group_error() -> Outcome:
    """Idle survivors: no op in flight; the group must notice on its own."""
    backend = backend_of(dist.group.WORLD)
    seen = wait_until(lambda: backend.error_info() is not None, 4 * HEARTBEAT_S + 5, "the group to notice the stop")
    kind, ranks, message = backend.error_info()
    class_name = {"peer failure": "PeerFailureError"}.get(kind, kind)
    return Outcome(ok=False, class_names=(class_name,), failed_ranks=tuple(ranks), message=message, ended=seen)


def stop_worker(ctx: WorkerContext, mode: str) -> dict[str, Any]:
    baseline = settled_baseline()
    ctx.init("monarch", timeout=OP_TIMEOUT)
    store = ctx.store()
    store.set(f"pid/{ctx.rank}", str(os.getpid()))
    stamp = os.path.join(ctx.tmp_dir, "stopped")
    run_op("all_reduce", 0)
    dist.barrier()
    if mode == "idle":
        if ctx.rank == VICTIM:
            signal_self(signal.SIGSTOP, stamp)
            raise AssertionError("a stopped rank is killed, never resumed")
        failure = _wait_for_group_error()
    else:
        failure = Outcome(ok=True)
        for step, name in op_sequence(7):
            if step == STOP_AT_STEP and ctx.rank == VICTIM:
                signal_self(signal.SIGSTOP, stamp)
                raise AssertionError("a stopped rank is killed, never resumed")
            failure = attempt(lambda: run_op(name, step))
            if not failure.ok:
                break
    detect_s = failure.ended - read_stamp(stamp)
    if ctx.rank == min(r for r in range(ctx.world_size) if r != VICTIM):
        kill_and_wait(int(store.get(f"pid/{VICTIM}")))

    problems: list[str] = []
    if not failure.is_a("PeerFailureError") or failure.failed_ranks != (VICTIM,):
        problems.append(f"rank {ctx.rank}: expected PeerFailureError naming [{VICTIM}], {failure.describe()}")
    if detect_s > STOP_DETECT_BOUND_S:
        problems.append(f"rank {ctx.rank}: noticed the stop after {detect_s:.3f} s (bound {STOP_DETECT_BOUND_S} s)")
    if detect_s < HEARTBEAT_S / 2:
        problems.append(f"rank {ctx.rank}: declared a stopped peer failed after {detect_s:.3f} s, before its heartbeat timeout")
    later = attempt(lambda: run_op("barrier", 100))
    if not later.is_a("PeerFailureError") or later.elapsed_s > 0.5:
        problems.append(f"rank {ctx.rank}: an op on the broken group {later.describe()}")

    before = backend_of(dist.group.WORLD).connection_count()
    dist.shrink_group([VICTIM])
    after = backend_of(dist.group.WORLD).connection_count()
    if after > before:
        problems.append(f"rank {ctx.rank}: shrink_group opened connections ({before} before, {after} after)")
    run_mix(8, 8, problems, f"rank {ctx.rank}: on the shrunk group")
    if not problems:
        dist.barrier()
    problems += teardown_leaks(baseline)
    return {"detect_s": detect_s, "message": failure.message[:200], "problems": problems}


@pytest.mark.parametrize("transport", ["auto", pytest.param("rdma", marks=requires_rdma)])
@pytest.mark.parametrize("mode", ["busy", "idle"])
def test_sigstop_is_detected_by_heartbeat(mode: str, transport: str) -> None:
    env = {**transport_env(transport), "MONARCH_HEARTBEAT_TIMEOUT": str(HEARTBEAT_S)}
    results = run_workers(stop_worker, WORLD_SIZE, mode, timeout=120, env=env)
    victim = results[VICTIM]
    assert victim.exit_code == -signal.SIGKILL, f"victim: exit code {victim.exit_code}, {victim.problem}"
    for report in assert_no_problems(results, skip={VICTIM}):
        logger.info("%s: noticed the stop in %.3f s: %s", mode, report["detect_s"], report["message"])
