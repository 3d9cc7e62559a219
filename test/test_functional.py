"""torch.distributed._functional_collectives over monarch groups."""

from __future__ import annotations

from datetime import timedelta

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol

from multiproc import WorkerContext, run_workers_ok
from reference import Checker, assert_all_passed, rank_input, reference_reduce

TIMEOUT = timedelta(seconds=60)


def functional_worker(ctx: WorkerContext) -> tuple[int, list[str]]:
    check = Checker(ctx.rank)
    ctx.init("monarch", timeout=TIMEOUT)
    world, me = ctx.world_size, ctx.rank
    pair = dist.new_group([0, 1], backend="monarch")
    groups: dict[str, tuple[dist.ProcessGroup, list[int]]] = {"world": (dist.group.WORLD, list(range(world)))}
    if me in (0, 1):
        groups["pair"] = (pair, [0, 1])
    for name, (group, ranks) in groups.items():
        n = len(ranks)
        inputs = {rank: rank_input(rank, n * 40 * 3, torch.float32, 2).view(n * 40, 3) for rank in ranks}
        mine = inputs[me]
        everyone = [inputs[rank] for rank in ranks]
        total = reference_reduce(everyone, "SUM")

        result = funcol.wait_tensor(funcol.all_reduce(mine, "sum", group))
        check.close(f"{name} all_reduce sum", result, total)
        check.close(f"{name} all_reduce input untouched", mine, inputs[me])
        result = funcol.wait_tensor(funcol.all_reduce(mine, "max", group))
        check.close(f"{name} all_reduce max", result, reference_reduce(everyone, "MAX"))
        result = funcol.wait_tensor(funcol.all_gather_tensor(mine, 0, group))
        check.close(f"{name} all_gather_tensor dim 0", result, torch.cat(everyone, 0))
        result = funcol.wait_tensor(funcol.all_gather_tensor(mine, 1, group))
        check.close(f"{name} all_gather_tensor dim 1", result, torch.cat(everyone, 1))
        result = funcol.wait_tensor(funcol.reduce_scatter_tensor(mine, "sum", 0, group))
        check.close(f"{name} reduce_scatter_tensor", result, total.chunk(n, 0)[ranks.index(me)])
        result = funcol.wait_tensor(funcol.broadcast(mine, ranks[-1], group))
        check.close(f"{name} broadcast", result, inputs[ranks[-1]])
        result = funcol.wait_tensor(funcol.all_to_all_single(mine, None, None, group))
        expected = torch.cat([inputs[rank].chunk(n, 0)[ranks.index(me)] for rank in ranks])
        check.close(f"{name} all_to_all_single", result, expected)
        # Lazy use: the result is an AsyncCollectiveTensor, waited on first use.
        lazy = funcol.all_reduce(mine, "sum", group) * 2
        check.close(f"{name} all_reduce used lazily", lazy, total * 2)
        coalesced = funcol.all_reduce_coalesced([mine, mine[:1]], "sum", group)
        check.close(f"{name} all_reduce_coalesced 0", funcol.wait_tensor(coalesced[0]), total)
        check.close(f"{name} all_reduce_coalesced 1", funcol.wait_tensor(coalesced[1]), total[:1])
    return check.report()


def test_functional_collectives() -> None:
    assert_all_passed(run_workers_ok(functional_worker, 3), min_checks=10)
