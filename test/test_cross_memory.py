"""The allreduce, reduce-scatter and allgather of ordinary CPU tensors on one
host, which read and write the peers' tensors with the kernel's cross-memory
copies as ``Options.cross_memory`` says (algorithms/cross_memory_direct.h).

- With "all", from 1 MiB the three ops give the right results (odd lengths,
  the streaming sizes, bfloat16, int64 MAX, the allgather in place as FSDP
  calls it) and run there (``cross_memory_ops`` counts each); below 1 MiB
  they go through the slots.
- With the default "allreduce" only the allreduce does; with "off" none,
  with the same results; one rank with "off" in a group whose others have
  "all" sends every op through the slots, without a hang.
- SIGKILL during a loop of them: every survivor gets PeerFailureError
  naming the victim within the bound.

Where the kernel refuses the ranks each other's memory, every op goes
through the slots instead, with the same results, and that is what the
counts expect there.
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

import torch_monarch
from cross_memory_access import ranks_reach_each_other
from multiproc import WorkerContext, run_workers, run_workers_ok
from reference import Checker, assert_all_passed, rank_input, reference_reduce
from shm_segments import assert_killed_and_named, kill_worker

# Just over 1 MiB of float32 (the reduce-scatter's and allgather's whole
# blocks too, at worlds 2 and 3), the smallest ops that take the path; 64 MB
# and a few, whose reduce-scatter and allgather write their results with
# streaming stores, with uneven tails.
SIZES = ((1 << 18) + 8, (64 << 20) // 4 + 5)


def ops_taking_the_copies(check: Checker, n: int, rank: int, numel: int, group: dist.ProcessGroup, label: str) -> int:
    """Runs the four ops on ``group``, checks their results and returns how
    many of them took the cross-memory copies."""
    before = torch_monarch._C.cross_memory_ops()
    inputs = [rank_input(peer, numel, torch.float32, 3) for peer in range(n)]
    data = inputs[rank].clone()
    dist.all_reduce(data, group=group)
    check.close(f"{label}: all_reduce of {numel}", data, reference_reduce(inputs, "SUM"))

    block = numel // n
    whole = [x[: block * n] for x in inputs]
    mine = torch.empty(block)
    source = whole[rank].clone()
    dist.reduce_scatter_tensor(mine, source, group=group)
    check.close(f"{label}: reduce_scatter_tensor of {numel}", mine, reference_reduce(whole, "SUM").view(n, block)[rank])
    check.close(f"{label}: reduce_scatter_tensor of {numel} leaves its input", source, whole[rank])

    expected = torch.cat([x.view(n, block)[0] for x in whole])
    gathered = torch.empty(block * n)
    dist.all_gather_into_tensor(gathered, whole[rank].view(n, block)[0].clone(), group=group)
    check.close(f"{label}: all_gather_into_tensor of {numel}", gathered, expected)
    # As FSDP2 calls it: the input is this rank's block of the output.
    in_place = torch.zeros(block * n)
    in_place.view(n, block)[rank].copy_(whole[rank].view(n, block)[0])
    dist.all_gather_into_tensor(in_place, in_place.view(n, block)[rank], group=group)
    check.close(f"{label}: all_gather_into_tensor of {numel} in place", in_place, expected)
    return torch_monarch._C.cross_memory_ops() - before


def every_op_worker(ctx: WorkerContext) -> tuple[int, list[str]]:
    check = Checker(ctx.rank)
    ctx.init("monarch", pg_options=torch_monarch.Options(cross_memory="all"))
    n, rank = ctx.world_size, ctx.rank
    allowed = ranks_reach_each_other(ctx)
    world = dist.group.WORLD
    assert world is not None
    for numel in SIZES:
        ran = ops_taking_the_copies(check, n, rank, numel, world, "all")
        check.true(f"the four ops of {numel} read and wrote the peers' tensors", ran == 4 * allowed, f"{ran} did")

    before = torch_monarch._C.cross_memory_ops()
    halves = [rank_input(peer, (1 << 20) // n * n, torch.bfloat16, 6) for peer in range(n)]
    mine = torch.empty((1 << 20) // n, dtype=torch.bfloat16)
    dist.reduce_scatter_tensor(mine, halves[rank].clone())
    check.close("reduce_scatter_tensor in bfloat16", mine, reference_reduce(halves, "SUM").view(n, -1)[rank], op="SUM")
    longs = [rank_input(peer, (1 << 17) + 3, torch.int64, 8) for peer in range(n)]
    largest = longs[rank].clone()
    dist.all_reduce(largest, op=dist.ReduceOp.MAX)
    check.close("all_reduce MAX in int64", largest, reference_reduce(longs, "MAX"))
    ran = torch_monarch._C.cross_memory_ops() - before
    check.true("bfloat16 and int64 ran there too", ran == 2 * allowed, f"{ran} did")

    small = [rank_input(peer, (1 << 18) - 16, torch.float32, 9) for peer in range(n)]
    before = torch_monarch._C.cross_memory_ops()
    data = small[rank].clone()
    dist.all_reduce(data)
    check.close("all_reduce just below 1 MiB", data, reference_reduce(small, "SUM"))
    check.true("it went through the slots", torch_monarch._C.cross_memory_ops() == before)
    dist.destroy_process_group()
    return check.report()


def test_every_op_reads_and_writes_the_peers_tensors() -> None:
    assert_all_passed(run_workers_ok(every_op_worker, 3, timeout=240), min_checks=17)


def settings_worker(ctx: WorkerContext) -> tuple[int, list[str]]:
    check = Checker(ctx.rank)
    ctx.init("monarch")  # the default: the allreduce alone
    allowed = ranks_reach_each_other(ctx)
    world = dist.group.WORLD
    assert world is not None
    off = dist.new_group(backend="monarch", pg_options=torch_monarch.Options(cross_memory="off"))
    rank_zero_off = dist.new_group(
        backend="monarch", pg_options=torch_monarch.Options(cross_memory="off" if ctx.rank == 0 else "all")
    )
    for group, label, expected in (
        (world, "the default", 1),
        (off, "off", 0),
        (rank_zero_off, "rank 0 off, the others all", 0),
    ):
        ran = ops_taking_the_copies(check, ctx.world_size, ctx.rank, SIZES[0], group, label)
        expected *= allowed
        check.true(f"{label}: {expected} of the four ops took the cross-memory copies", ran == expected, f"{ran} did")
    try:
        torch_monarch.Options(cross_memory="reduce_scatter").validate()
        check.fail("cross_memory='reduce_scatter'", "was accepted")
    except ValueError as error:
        check.true("an unknown cross_memory names the choices", "allreduce" in str(error), str(error))
    dist.destroy_process_group()
    return check.report()


def test_the_setting_picks_the_ops_and_off_goes_through_the_slots() -> None:
    assert_all_passed(run_workers_ok(settings_worker, 2, timeout=120), min_checks=15)


@pytest.mark.parametrize("op", ["all_reduce", "reduce_scatter"])
def test_kill_during_cross_memory_ops(op: str) -> None:
    # The victim dies while its peers read (and for the allreduce write) its tensor.
    assert_killed_and_named(run_workers(kill_worker, 3, "", op, "all", timeout=60))
