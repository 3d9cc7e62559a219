"""Subgroups over monarch, and monarch next to Gloo in the same processes
(results compared with Gloo's)."""

from __future__ import annotations

from datetime import timedelta

import torch
import torch.distributed as dist

from multiproc import WorkerContext, run_workers_ok
from reference import Checker, assert_all_passed, rank_input, reference_reduce

TIMEOUT = timedelta(seconds=60)


def subgroup_worker(ctx: WorkerContext) -> tuple[int, list[str]]:
    check = Checker(ctx.rank)
    ctx.init("monarch", timeout=TIMEOUT)
    me = ctx.rank
    # Every rank creates every group, members or not (torch requires it).
    evens = dist.new_group([0, 2], backend="monarch")
    odds = dist.new_group([1, 3], backend="monarch")
    upper = dist.new_group([1, 2, 3], backend="monarch")
    memberships = {"evens": (evens, [0, 2]), "odds": (odds, [1, 3]), "upper": (upper, [1, 2, 3])}
    for name, (group, ranks) in memberships.items():
        if me not in ranks:
            check.true(f"{name}: non-member", group == dist.GroupMember.NON_GROUP_MEMBER)
            check.true(f"{name}: non-member rank -1", dist.get_rank(group) == -1)
            continue
        check.true(f"{name}: group rank", dist.get_rank(group) == ranks.index(me))
        check.true(f"{name}: group size", dist.get_world_size(group) == len(ranks))
        check.true(f"{name}: backend", dist.get_backend(group) == "monarch", dist.get_backend(group))
        inputs = {rank: rank_input(rank, 1500, torch.int64, 4) for rank in ranks}
        tensor = inputs[me].clone()
        dist.all_reduce(tensor, group=group)
        check.close(f"{name}: all_reduce", tensor, reference_reduce(list(inputs.values()), "SUM"))
        # Roots given as global ranks (src/dst) and as group ranks (group_src).
        last = ranks[-1]
        tensor = inputs[me].clone()
        dist.broadcast(tensor, src=last, group=group)
        check.close(f"{name}: broadcast src={last}", tensor, inputs[last])
        tensor = inputs[me].clone()
        dist.broadcast(tensor, group_src=0, group=group)
        check.close(f"{name}: broadcast group_src=0", tensor, inputs[ranks[0]])
        tensor = inputs[me].clone()
        dist.reduce(tensor, dst=last, op=dist.ReduceOp.MAX, group=group)
        if me == last:
            check.close(f"{name}: reduce dst={last}", tensor, reference_reduce(list(inputs.values()), "MAX"))
        outputs = [torch.empty(1500, dtype=torch.int64) for _ in ranks]
        dist.all_gather(outputs, inputs[me], group=group)
        for rank, output in zip(ranks, outputs):
            check.close(f"{name}: all_gather from {rank}", output, inputs[rank])
        # Point-to-point inside the group, addressed by global rank.
        first, second = ranks[0], ranks[1]
        if me == first:
            dist.send(inputs[me], dst=second, group=group, tag=1)
        elif me == second:
            buffer = torch.empty(1500, dtype=torch.int64)
            dist.recv(buffer, src=first, group=group, tag=1)
            check.close(f"{name}: recv from {first}", buffer, inputs[first])
        dist.barrier(group=group)
    # The world group still works after, and between, subgroup ops.
    tensor = torch.full((4,), float(me))
    dist.all_reduce(tensor)
    check.close("world all_reduce", tensor, torch.full((4,), 6.0))
    return check.report()


def test_subgroups() -> None:
    assert_all_passed(run_workers_ok(subgroup_worker, 4), min_checks=10)


def _compare_with_gloo(check: Checker, monarch: dist.ProcessGroup, gloo: dist.ProcessGroup, me: int, world: int) -> None:
    """Runs each collective on both groups from the same inputs and compares."""
    generator = torch.Generator().manual_seed(100 + me)
    data = torch.randn(200_003, generator=generator)  # fractional: summation order matters
    ints = torch.randint(-1000, 1000, (4097,), generator=generator)
    for op in (dist.ReduceOp.SUM, dist.ReduceOp.MAX, dist.ReduceOp.MIN, dist.ReduceOp.PRODUCT):
        for values in (data, ints):
            results = []
            for group in (monarch, gloo):
                tensor = values.clone()
                dist.all_reduce(tensor, op=op, group=group)
                results.append(tensor)
            tolerance = (1e-5, 1e-5) if values.is_floating_point() else (0.0, 0.0)
            check.close(f"all_reduce {op} {values.dtype} vs gloo", results[0], results[1], tolerance=tolerance)
    gathered = []
    for group in (monarch, gloo):
        outputs = [torch.empty_like(data) for _ in range(world)]
        dist.all_gather(outputs, data, group=group)
        gathered.append(torch.stack(outputs))
    check.close("all_gather vs gloo", gathered[0], gathered[1])
    broadcast = []
    for group in (monarch, gloo):
        tensor = data.clone()
        dist.broadcast(tensor, src=world - 1, group=group)
        broadcast.append(tensor)
    check.close("broadcast vs gloo", broadcast[0], broadcast[1])
    exchanged = []
    for group in (monarch, gloo):
        output = torch.empty(world * 1000)
        dist.all_to_all_single(output, data[: world * 1000].clone(), group=group)
        exchanged.append(output)
    check.close("all_to_all_single vs gloo", exchanged[0], exchanged[1])


def mixed_worker(ctx: WorkerContext, default_backend: str) -> tuple[int, list[str]]:
    """Default group on one backend, a second all-rank group on the other,
    used alternately."""
    check = Checker(ctx.rank)
    ctx.init(default_backend, timeout=TIMEOUT)
    other_backend = "gloo" if default_backend == "monarch" else "monarch"
    other = dist.new_group(backend=other_backend)
    check.true("default backend", dist.get_backend() == default_backend, dist.get_backend())
    check.true("other backend", dist.get_backend(other) == other_backend, dist.get_backend(other))
    groups = {default_backend: dist.group.WORLD, other_backend: other}
    _compare_with_gloo(check, groups["monarch"], groups["gloo"], ctx.rank, ctx.world_size)
    # A Gloo subgroup of some ranks next to the monarch groups.
    partial = dist.new_group([0, 1], backend="gloo")
    if ctx.rank in (0, 1):
        tensor = torch.ones(3)
        dist.all_reduce(tensor, group=partial)
        check.close("gloo subgroup", tensor, torch.full((3,), 2.0))
    tensor = torch.ones(3)
    dist.all_reduce(tensor, group=groups["monarch"])
    check.close("monarch after gloo subgroup", tensor, torch.full((3,), float(ctx.world_size)))
    return check.report()


def test_monarch_default_with_gloo_group() -> None:
    assert_all_passed(run_workers_ok(mixed_worker, 3, "monarch"), min_checks=10)


def test_gloo_default_with_monarch_group() -> None:
    assert_all_passed(run_workers_ok(mixed_worker, 2, "gloo"), min_checks=10)
