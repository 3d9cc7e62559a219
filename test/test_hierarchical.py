"""Allreduce across hosts: one machine poses as several through
Options.host_name. With the same number of ranks on every host, a large
allreduce reduces within each host first, and across hosts each rank talks
only to the ranks that hold the same block; otherwise it runs flat. Either
way the result is exact and the same on every rank.
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

import torch_monarch
from faults import backend_of
from multiproc import WorkerContext, run_workers_ok
from reference import Checker, assert_all_passed, rank_input, reference_reduce

NUMEL = (1 << 20) + 5  # above the small-message path, blocks of unequal length


def hosts_worker(ctx: WorkerContext, layout: str) -> tuple[int, list[str]]:
    check = Checker(ctx.rank)
    ctx.init("monarch")
    group = dist.new_group(backend="monarch", pg_options=torch_monarch.Options(host_name=layout[ctx.rank]))
    world = ctx.world_size
    for seed, (dtype, op) in enumerate([(torch.float32, "SUM"), (torch.bfloat16, "MAX"), (torch.int64, "SUM")]):
        inputs = [rank_input(rank, NUMEL, dtype, seed) for rank in range(world)]
        tensor = inputs[ctx.rank].clone()
        dist.all_reduce(tensor, op=getattr(dist.ReduceOp, op), group=group)
        check.close(f"{layout} {dtype} {op}", tensor, reference_reduce(inputs, op), op)
        everyone = [torch.empty_like(tensor) for _ in range(world)]
        dist.all_gather(everyone, tensor)
        check.true(f"{layout} {dtype} same bits on every rank", all(torch.equal(t, tensor) for t in everyone))

    sent = backend_of(group).payload_bytes_sent()
    same_host = [r for r in range(world) if r != ctx.rank and layout[r] == layout[ctx.rank]]
    other_hosts = [r for r in range(world) if layout[r] != layout[ctx.rank]]
    check.true(f"{layout}: data to every rank on this host", all(sent[r] > 0 for r in same_host), str(sent))
    if layout in ("aabb", "abab"):
        # Across hosts only to the rank with the same position on its host.
        position = [r for r in range(world) if layout[r] == layout[ctx.rank]].index(ctx.rank)
        partner = [r for r in other_hosts if [q for q in range(world) if layout[q] == layout[r]].index(r) == position]
        check.true(f"{layout}: data to the partner across hosts", all(sent[r] > 0 for r in partner), str(sent))
        check.true(
            f"{layout}: nothing to other ranks across hosts",
            all(sent[r] == 0 for r in other_hosts if r not in partner),
            str(sent),
        )
    else:
        check.true(f"{layout}: flat, data to every rank", all(sent[r] > 0 for r in other_hosts), str(sent))
    return check.report()


@pytest.mark.parametrize("layout", ["aabb", "abab", "aaab"])
def test_allreduce_across_hosts(layout: str) -> None:
    assert_all_passed(run_workers_ok(hosts_worker, 4, layout), min_checks=8)
