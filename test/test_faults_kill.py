"""SIGKILL a rank at a random point of a mix of collectives, over seeded trials.

Each run starts ``world`` ranks and kills ranks one after the other until two
are left: after each kill the survivors check what they saw, shrink the
default group past the dead rank (on the links they hold) and go on, so a
run also covers a failure inside an already shrunk group. The kill lands
mid-op (a timer thread in the victim), just before an op, or while the
victim's own async op is in flight. Every time:

- no hang: every op ends, bounded by the harness;
- no wrong result reported as success: every op that returned is checked;
- every survivor raises PeerFailureError naming the victim's group rank,
  within 0.5 s of the kill (measured from a stamp the victim writes just
  before it sends itself SIGKILL), and the group stays broken;
- shrink_group opens no connection and the shrunk group computes correctly;
- after destroy_process_group no thread, fd or shared-memory mapping is left.

The CI part runs a few seeds; ``MONARCH_SOAK=1`` runs many more
(``MONARCH_SOAK_TRIALS``, default 40).
"""

from __future__ import annotations

import logging
import os
import random
import signal
import threading
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
import torch.distributed as dist

from fault_workload import WrongResultError, op_sequence, run_mix, run_op, start_all_reduce_large
from faults import Outcome, attempt, backend_of, read_stamp, settled_baseline, signal_self, teardown_leaks, wait_until
from monarch_groups import transport_env
from multiproc import RankResult, WorkerContext, run_workers
from rdma_support import requires_rdma

logger = logging.getLogger(__name__)

WORLD_SIZE = 4
# Far above every bound below: only a hang would reach it.
OP_TIMEOUT = timedelta(seconds=10)
KILL_DETECT_BOUND_S = 0.5
# A later op on the broken group must fail at once.
FAIL_FAST_BOUND_S = 0.5
# How long a round may run ops before the kill must have been noticed.
ROUND_BOUND_S = 8.0
OPS_AFTER_SHRINK = 8
CI_SEEDS = list(range(3))
SOAK = os.environ.get("MONARCH_SOAK") == "1"
SOAK_SEEDS = list(range(1000, 1000 + int(os.environ.get("MONARCH_SOAK_TRIALS", "40"))))


@dataclass(frozen=True)
class KillRound:
    victim: int  # global rank
    mode: str  # "timer": a thread kills it mid-run; "before_op"; "async_pending"
    delay_s: float  # timer mode: after the round's barrier
    op_index: int  # before_op / async_pending: the step at which it dies


@dataclass(frozen=True)
class KillPlan:
    seed: int
    world_size: int
    rounds: tuple[KillRound, ...]


def make_plan(seed: int, world_size: int) -> KillPlan:
    rng = random.Random(seed)
    victims = rng.sample(range(world_size), world_size - 2)
    rounds = tuple(
        KillRound(
            victim=victim,
            mode=rng.choice(("timer", "timer", "before_op", "async_pending")),
            delay_s=rng.uniform(0.0, 0.3),
            op_index=rng.randrange(6),
        )
        for victim in victims
    )
    return KillPlan(seed, world_size, rounds)


def _arm_timer(delay_s: float, stamp: str) -> None:
    def fire() -> None:
        # The random delay picks the injection point; it synchronises nothing.
        time.sleep(delay_s)
        signal_self(signal.SIGKILL, stamp)

    threading.Thread(target=fire, name="killer", daemon=True).start()


def _run_until_failure(ctx: WorkerContext, plan: KillPlan, round_index: int, stamp: str) -> tuple[Outcome, int]:
    """Runs the round's op mix until an op fails; returns it and the op count."""
    kill = plan.rounds[round_index]
    victim = ctx.rank == kill.victim
    deadline = time.monotonic() + ROUND_BOUND_S
    for step, name in op_sequence(plan.seed * 100 + round_index):
        if kill.mode != "timer" and step == kill.op_index:
            if kill.mode == "async_pending":
                name = "all_reduce_large"
                if victim:
                    # Dies with its own large op half sent.
                    start_all_reduce_large(step)
                    signal_self(signal.SIGKILL, stamp)
            elif victim:
                signal_self(signal.SIGKILL, stamp)
        outcome = attempt(lambda: run_op(name, step))
        if not outcome.ok:
            return outcome, step
        if time.monotonic() > deadline:
            raise AssertionError(f"rank {ctx.rank}: no op failed within {ROUND_BOUND_S} s of round {round_index}")
    raise AssertionError("unreachable")


def _check_survivor(
    ctx: WorkerContext, failure: Outcome, victim_group_rank: int, stamp: str, problems: list[str]
) -> dict[str, Any]:
    where = f"rank {ctx.rank}"
    if failure.is_a(WrongResultError.__name__):
        problems.append(f"{where}: {failure.message}")
        return {}
    detect_s = failure.ended - read_stamp(stamp)
    if not failure.is_a("PeerFailureError") or failure.failed_ranks != (victim_group_rank,):
        problems.append(f"{where}: expected PeerFailureError naming [{victim_group_rank}], {failure.describe()}")
    if not failure.is_a("DistBackendError"):
        problems.append(f"{where}: {failure.class_names[0]} is not a DistBackendError")
    if detect_s > KILL_DETECT_BOUND_S:
        problems.append(f"{where}: raised {detect_s:.3f} s after the kill (bound {KILL_DETECT_BOUND_S} s)")
    info = backend_of(dist.group.WORLD).error_info()
    if info is None or info[0] != "peer failure" or list(info[1]) != [victim_group_rank]:
        problems.append(f"{where}: error_info() after the failure is {info!r}")
    later = attempt(lambda: run_op("all_reduce", 10_000))
    if later.ok or not later.is_a("PeerFailureError") or later.elapsed_s > FAIL_FAST_BOUND_S:
        problems.append(f"{where}: an op on the broken group {later.describe()}")
    return {"detect_s": detect_s, "op": failure.message[:160]}


def _shrink_and_go_on(
    ctx: WorkerContext, plan: KillPlan, round_index: int, victim_group_rank: int, members: list[int], problems: list[str]
) -> dict[str, Any]:
    where = f"rank {ctx.rank}"
    before = backend_of(dist.group.WORLD).connection_count()
    start = time.perf_counter()
    dist.shrink_group([victim_group_rank])
    shrink_s = time.perf_counter() - start
    after = backend_of(dist.group.WORLD).connection_count()
    if after > before:
        problems.append(f"{where}: shrink_group opened connections: {before} before, {after} after")
    survivors = [m for m in members if m != plan.rounds[round_index].victim]
    if dist.get_world_size() != len(survivors) or dist.get_rank() != survivors.index(ctx.rank):
        problems.append(f"{where}: shrunk group is rank {dist.get_rank()}/{dist.get_world_size()}, members {survivors}")
    run_mix(plan.seed * 100 + round_index + 50, OPS_AFTER_SHRINK, problems, f"{where}: on the shrunk group")
    # The only live links left are those to the survivors (a link to the dead
    # rank may be noticed a moment after the notice that named it).
    live = len(survivors) - 1
    backend = backend_of(dist.group.WORLD)
    try:
        wait_until(lambda: backend.connection_count() == live, 2.0, f"{live} live connections")
    except AssertionError:
        problems.append(f"{where}: {backend.connection_count()} live connections after shrinking, expected {live}")
    del backend
    return {"shrink_s": shrink_s, "connections": (before, after)}


def kill_worker(ctx: WorkerContext, plan: KillPlan) -> dict[str, Any]:
    baseline = settled_baseline()
    ctx.init("monarch", timeout=OP_TIMEOUT)
    members = list(range(ctx.world_size))
    problems: list[str] = []
    rounds: list[dict[str, Any]] = []
    for round_index, kill in enumerate(plan.rounds):
        stamp = os.path.join(ctx.tmp_dir, f"killed-{round_index}")
        dist.barrier()
        if ctx.rank == kill.victim and kill.mode == "timer":
            _arm_timer(kill.delay_s, stamp)
        failure, steps = _run_until_failure(ctx, plan, round_index, stamp)
        if ctx.rank == kill.victim:
            # Its own kill is under way (or the round failed without it).
            raise AssertionError(f"victim rank {ctx.rank} saw its op fail before dying: {failure.describe()}")
        victim_group_rank = members.index(kill.victim)
        seen = _check_survivor(ctx, failure, victim_group_rank, stamp, problems)
        seen.update(steps=steps, mode=kill.mode, victim=kill.victim)
        if problems:
            break
        seen.update(_shrink_and_go_on(ctx, plan, round_index, victim_group_rank, members, problems))
        members.remove(kill.victim)
        rounds.append(seen)
        if problems:
            break
    if not problems:
        # Nobody tears down (closing its links) before all have checked theirs.
        dist.barrier()
    problems += teardown_leaks(baseline)
    return {"rounds": rounds, "problems": problems}


def judge(plan: KillPlan, results: list[RankResult]) -> list[dict[str, Any]]:
    """Asserts every rank did what the plan says; returns the survivors' reports."""
    victims = {kill.victim for kill in plan.rounds}
    failures: list[str] = []
    reports = []
    for result in results:
        if result.rank in victims:
            if result.exit_code != -signal.SIGKILL or result.error is not None:
                failures.append(f"victim rank {result.rank}: exit code {result.exit_code}, {result.error}")
            continue
        if not result.ok:
            failures.append(f"rank {result.rank}: {result.problem or ''} {result.error.message if result.error else ''}")
            if result.error is not None:
                failures.append(result.error.traceback)
            continue
        failures += result.value["problems"]
        reports.append(result.value)
    assert not failures, f"plan {plan}:\n" + "\n".join(failures)
    return reports


def _run_plan(seed: int, env: dict[str, str] | None = None) -> None:
    plan = make_plan(seed, WORLD_SIZE)
    results = run_workers(kill_worker, plan.world_size, plan, timeout=120, env=env)
    reports = judge(plan, results)
    for report in reports:
        for seen in report["rounds"]:
            logger.info(
                "seed %d victim %d (%s): detected in %.1f ms after %d ops, shrink %.2f ms, connections %s",
                seed, seen["victim"], seen["mode"], seen["detect_s"] * 1e3, seen["steps"],
                seen["shrink_s"] * 1e3, seen["connections"],
            )


@pytest.mark.parametrize("seed", CI_SEEDS)
def test_sigkill_at_random_points(seed: int) -> None:
    _run_plan(seed)


@requires_rdma
def test_sigkill_over_rdma() -> None:
    # Every rank a host of its own: the payloads of the mix go by RDMA read.
    _run_plan(CI_SEEDS[0], env=transport_env("rdma"))


@pytest.mark.skipif(not SOAK, reason="soak: set MONARCH_SOAK=1")
@pytest.mark.timeout(0)
@pytest.mark.parametrize("seed", SOAK_SEEDS)
def test_sigkill_soak(seed: int) -> None:
    _run_plan(seed)


def test_plans_cover_every_mode() -> None:
    modes = {kill.mode for seed in CI_SEEDS for kill in make_plan(seed, WORLD_SIZE).rounds}
    assert modes == {"timer", "before_op", "async_pending"}, modes
