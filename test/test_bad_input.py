"""Bad arguments fail at once on the calling rank with ValueError/TypeError
(or torch's own argument check) naming the problem, and leave the group
usable: the other ranks never see the bad call, so it must not use up a
sequence number or send anything."""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Callable

import torch
import torch.distributed as dist

from multiproc import WorkerContext, run_workers_ok

WORLD = 3
# A bad call is refused on the caller's thread, before anything is queued.
AT_ONCE_S = 1.0


@dataclass(frozen=True)
class BadCall:
    call: Callable[[dist.ProcessGroup, int], object]
    # Acceptable exception class names, and words the message must contain.
    errors: tuple[str, ...]
    words: tuple[str, ...]


def _broadcast_root(group: dist.ProcessGroup, root: int) -> None:
    options = dist.BroadcastOptions()
    options.rootRank = root
    group.broadcast([torch.ones(3)], options).wait()


def _reduce_root(group: dist.ProcessGroup, root: int) -> None:
    options = dist.ReduceOptions()
    options.rootRank = root
    group.reduce([torch.ones(3)], options).wait()


def _all_reduce_pg(tensor: torch.Tensor, op: dist.ReduceOp, group: dist.ProcessGroup) -> None:
    options = dist.AllreduceOptions()
    options.reduceOp = op
    group.allreduce([tensor], options).wait()


VALUE = ("ValueError",)
TYPE = ("TypeError",)

CASES: dict[str, BadCall] = {
    "broadcast root out of range (pg api)": BadCall(lambda g, r: _broadcast_root(g, WORLD), VALUE, ("root", str(WORLD))),
    "broadcast negative root (pg api)": BadCall(lambda g, r: _broadcast_root(g, -1), VALUE, ("root",)),
    "reduce root out of range (pg api)": BadCall(lambda g, r: _reduce_root(g, WORLD + 5), VALUE, ("root",)),
    "broadcast src not in group": BadCall(
        lambda g, r: dist.broadcast(torch.ones(3), src=WORLD + 1), VALUE + ("RuntimeError",), (str(WORLD + 1),)
    ),
    "all_gather output list too short": BadCall(
        lambda g, r: dist.all_gather([torch.empty(3) for _ in range(WORLD - 1)], torch.ones(3)),
        VALUE,
        ("output", str(WORLD)),
    ),
    "all_gather output list too long": BadCall(
        lambda g, r: dist.all_gather([torch.empty(3) for _ in range(WORLD + 1)], torch.ones(3)),
        VALUE,
        ("output",),
    ),
    "all_gather output of wrong dtype": BadCall(
        lambda g, r: dist.all_gather([torch.empty(3, dtype=torch.int32) for _ in range(WORLD)], torch.ones(3)),
        TYPE + VALUE,  # torch's Python layer checks this one first (ValueError)
        ("dtype",),
    ),
    "all_gather_into_tensor output too small": BadCall(
        lambda g, r: dist.all_gather_into_tensor(torch.empty(WORLD * 3 - 1), torch.ones(3)),
        VALUE,
        ("output",),
    ),
    "reduce_scatter_tensor input too small": BadCall(
        lambda g, r: dist.reduce_scatter_tensor(torch.empty(3), torch.ones(WORLD * 3 - 2)),
        VALUE,
        ("input",),
    ),
    "BAND on float": BadCall(lambda g, r: dist.all_reduce(torch.ones(3), op=dist.ReduceOp.BAND), TYPE, ("BAND", "float32")),
    "BXOR on bfloat16": BadCall(
        lambda g, r: dist.all_reduce(torch.ones(3, dtype=torch.bfloat16), op=dist.ReduceOp.BXOR), TYPE, ("BXOR",)
    ),
    "AVG on int": BadCall(
        lambda g, r: dist.all_reduce(torch.ones(3, dtype=torch.int64), op=dist.ReduceOp.AVG), TYPE, ("AVG", "int64")
    ),
    "PREMUL_SUM on int": BadCall(
        lambda g, r: dist.all_reduce(torch.ones(3, dtype=torch.int32), op=dist._make_nccl_premul_sum(2.0)),
        TYPE,
        ("PREMUL_SUM",),
    ),
    "MAX on complex (pg api)": BadCall(
        lambda g, r: _all_reduce_pg(torch.ones(3, dtype=torch.complex64), dist.ReduceOp.MAX, g), TYPE, ("MAX", "complex64")
    ),
    "all_to_all_single split sum != rows": BadCall(
        lambda g, r: dist.all_to_all_single(
            torch.empty(WORLD, 2), torch.ones(WORLD, 2), input_split_sizes=[1] * (WORLD - 1) + [2],
            output_split_sizes=[1] * WORLD,
        ),
        VALUE,
        ("split",),
    ),
    "all_to_all_single wrong number of splits": BadCall(
        lambda g, r: dist.all_to_all_single(
            torch.empty(WORLD, 2), torch.ones(WORLD, 2), input_split_sizes=[WORLD], output_split_sizes=[1] * WORLD
        ),
        VALUE,
        ("split",),
    ),
    "all_to_all_single rows not divisible": BadCall(
        lambda g, r: dist.all_to_all_single(torch.empty(WORLD + 1), torch.ones(WORLD + 1)), VALUE, ("divisible",)
    ),
    "send to own rank": BadCall(lambda g, r: dist.send(torch.ones(3), dst=r), VALUE, ("rank",)),
    "send to own rank (pg api)": BadCall(lambda g, r: g.send([torch.ones(3)], r, 0).wait(), VALUE, ("itself",)),
    "recv from own rank (pg api)": BadCall(lambda g, r: g.recv([torch.ones(3)], r, 0).wait(), VALUE, ("itself",)),
    "send to rank out of range (pg api)": BadCall(
        lambda g, r: g.send([torch.ones(3)], WORLD, 0).wait(), VALUE, ("destination", str(WORLD))
    ),
    "two tensors per rank (pg api)": BadCall(
        lambda g, r: _all_reduce_pg_list(g), VALUE, ("one tensor",)
    ),
    "sparse tensor, not SUM": BadCall(
        lambda g, r: dist.all_reduce(torch.eye(3).to_sparse(), op=dist.ReduceOp.MAX), VALUE, ("sparse", "SUM")
    ),
}


def _all_reduce_pg_list(group: dist.ProcessGroup) -> None:
    group.allreduce([torch.ones(3), torch.ones(3)], dist.AllreduceOptions()).wait()


def bad_input_worker(ctx: WorkerContext) -> dict[str, tuple[tuple[str, ...], str, float]]:
    """Rank 0 makes each bad call alone; then every rank runs a valid
    all_reduce, which must still be right."""
    ctx.init("monarch", timeout=timedelta(seconds=30))
    group = dist.group.WORLD
    seen: dict[str, tuple[tuple[str, ...], str, float]] = {}
    for step, (name, case) in enumerate(CASES.items()):
        if ctx.rank == 0:
            start = time.monotonic()
            try:
                case.call(group, ctx.rank)
                seen[name] = ((), "returned without an error", time.monotonic() - start)
            except Exception as error:  # noqa: BLE001 - judged by the parent
                classes = tuple(c.__name__ for c in type(error).__mro__)
                seen[name] = (classes, str(error), time.monotonic() - start)
        tensor = torch.full((5,), float(step + ctx.rank))
        dist.all_reduce(tensor)
        expected = float(sum(step + rank for rank in range(ctx.world_size)))
        assert tensor.tolist() == [expected] * 5, f"all_reduce after {name!r}: {tensor.tolist()}"
    return seen


def test_bad_arguments_fail_at_once_and_leave_the_group_usable() -> None:
    seen = run_workers_ok(bad_input_worker, WORLD)[0]
    problems = []
    for name, case in CASES.items():
        classes, message, elapsed = seen[name]
        where = f"{name}: {classes[:1]} {message[:300]!r}"
        if not any(error in classes for error in case.errors):
            problems.append(f"{where}: expected one of {case.errors}")
        elif not all(word.lower() in message.lower() for word in case.words):
            problems.append(f"{where}: message should mention {case.words}")
        elif elapsed > AT_ONCE_S:
            problems.append(f"{where}: took {elapsed:.2f} s")
    assert not problems, "\n".join(problems)
