"""c10d's sequence numbers on monarch groups: object collectives on
subgroups, and TORCH_DISTRIBUTED_DEBUG=DETAIL (torch's ProcessGroupWrapper,
which checks every collective against the other ranks' before running it)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
import torch
import torch.distributed as dist

from multiproc import WorkerContext, run_workers_ok

TIMEOUT = timedelta(seconds=60)


def _cpu_backend(group: Any) -> Any:
    return group._get_backend(torch.device("cpu"))


def object_subgroup_worker(ctx: WorkerContext) -> dict[str, Any]:
    ctx.init("monarch", timeout=TIMEOUT)
    # Every rank but 0, so that group ranks differ from global ranks.
    members = list(range(1, ctx.world_size))
    group = dist.new_group(members, backend="monarch")
    if ctx.rank == 0:
        return {}
    result: dict[str, Any] = {}
    backend = _cpu_backend(group)
    result["seq_at_start"] = backend._get_sequence_number_for_group()
    gathered: list[Any] = [None] * len(members)
    dist.all_gather_object(gathered, {"rank": ctx.rank, "tag": "x" * ctx.rank}, group=group)
    result["all_gather_object"] = gathered
    dst = members[-1]
    received: Any = [None] * len(members) if ctx.rank == dst else None
    dist.gather_object(("from", ctx.rank), received, dst=dst, group=group)
    result["gather_object"] = received
    objects: list[Any] = [{"root": ctx.rank}] if ctx.rank == members[0] else [None]
    dist.broadcast_object_list(objects, src=members[0], group=group)
    result["broadcast_object_list"] = objects[0]
    out: list[Any] = [None]
    scattered = [f"piece {i}" for i in range(len(members))] if ctx.rank == members[0] else None
    dist.scatter_object_list(out, scattered, src=members[0], group=group)
    result["scatter_object_list"] = out[0]
    tensor = torch.ones(3)
    dist.all_reduce(tensor, group=group)
    result["seq_at_end"] = backend._get_sequence_number_for_group()
    result["all_reduce"] = tensor.tolist()
    return result


@pytest.mark.parametrize("world_size", [2, 3, 4])
def test_object_collectives_on_a_subgroup(world_size: int) -> None:
    results = run_workers_ok(object_subgroup_worker, world_size, timeout=120)
    members = list(range(1, world_size))
    n = len(members)
    member_results = [results[rank] for rank in members]
    for rank, result in zip(members, member_results):
        assert result["all_gather_object"] == [{"rank": r, "tag": "x" * r} for r in members], result
        if rank == members[-1]:
            assert result["gather_object"] == [("from", r) for r in members], result
        assert result["broadcast_object_list"] == {"root": members[0]}, result
        assert result["scatter_object_list"] == f"piece {members.index(rank)}", result
        assert result["all_reduce"] == [float(n)] * 3, result
        assert result["seq_at_start"] == 0, result
    # Every member posted the same collectives, so the numbers agree.
    ends = {result["seq_at_end"] for result in member_results}
    assert len(ends) == 1 and ends.pop() > 0, member_results


def detail_worker(ctx: WorkerContext) -> dict[str, Any]:
    # The env reached this process after torch was imported: apply it now.
    dist.set_debug_level_from_env()
    assert dist.get_debug_level() == dist.DebugLevel.DETAIL
    ctx.init("monarch", timeout=TIMEOUT)
    result: dict[str, Any] = {"wrapper": type(_cpu_backend(dist.group.WORLD)).__name__}
    tensor = torch.full((4,), float(ctx.rank + 1))
    dist.all_reduce(tensor)
    result["all_reduce"] = tensor.tolist()
    sub = dist.new_group(list(range(ctx.world_size)), backend="monarch")
    gathered: list[Any] = [None] * ctx.world_size
    dist.all_gather_object(gathered, ctx.rank, group=sub)
    result["all_gather_object"] = gathered
    # Ranks that call different collectives at the same point: the wrapper
    # compares them over its Gloo helper before monarch runs anything.
    try:
        if ctx.rank == 0:
            dist.all_reduce(torch.ones(4))
        else:
            dist.broadcast(torch.ones(4), src=0)
        result["mismatch"] = "no error"
    except RuntimeError as error:
        result["mismatch"] = str(error)
    # Same op, different shapes.
    try:
        dist.all_reduce(torch.ones(4 + ctx.rank))
        result["shape_mismatch"] = "no error"
    except RuntimeError as error:
        result["shape_mismatch"] = str(error)
    # The monarch group never saw the bad calls and keeps working.
    tensor = torch.ones(2)
    dist.all_reduce(tensor)
    result["after"] = tensor.tolist()
    return result


@pytest.mark.parametrize("world_size", [2, 3])
def test_debug_detail_wraps_checks_and_reports_mismatches(world_size: int) -> None:
    results = run_workers_ok(detail_worker, world_size, timeout=120, env={"TORCH_DISTRIBUTED_DEBUG": "DETAIL"})
    expected_sum = float(sum(range(1, world_size + 1)))
    for rank, result in enumerate(results):
        assert result["wrapper"] == "_ProcessGroupWrapper", result
        assert result["all_reduce"] == [expected_sum] * 4, result
        assert result["all_gather_object"] == list(range(world_size)), result
        assert "Detected mismatch between collectives on ranks" in result["mismatch"], result
        assert "Detected mismatch between collectives on ranks" in result["shape_mismatch"], result
        assert result["after"] == [float(world_size)] * 2, result
