"""Tensors from the group's allocator (``allocate_tensor``, which FSDP2's
``set_allocate_memory_from_process_group_for_comm`` calls): CPU tensors in
shared memory that the allreduce, reduce-scatter and allgather of a one-host
group read and write in place, with no copy through the slots.

- ``supports_tensor_alloc`` is true for the CPU and false for a CUDA device;
  ``allocate_tensor`` gives a CPU tensor of the size and dtype asked, and a
  clear ValueError for a CUDA device or a negative size.
- On pooled tensors the three ops give the right results, at small and at
  streaming sizes, with odd lengths, in bfloat16, in place as FSDP calls
  them (the all-gather's input a view of its output), and run in place
  (``direct_ops`` counts each); a group in which one rank's tensor is
  ordinary reads and writes them with cross-memory copies, with the same
  results.
- A freed tensor's block serves the next allocation of its size, and the
  peers' mappings of it stay right.
- SIGKILL during a loop of pooled allreduces: every survivor gets
  PeerFailureError naming the victim within the bound.
- The victim's pool names left in /dev/shm are removed by the next group
  that sets up on the host; a process that exits leaves none.
"""

from __future__ import annotations

import os
import signal
from typing import Any

import torch
import torch.distributed as dist

import torch_monarch
from cross_memory_access import ranks_reach_each_other
from faults import backend_of, process_state, wait_until
from multiproc import WorkerContext, run_workers, run_workers_ok
from reference import Checker, assert_all_passed, rank_input, reference_reduce
from shm_segments import assert_killed_and_named, kill_worker, pool_names_of

CPU = torch.device("cpu")
# 64 MB of float32 and a few: the reduce-scatter and allgather write their results with streaming
# stores (the in-place allreduce with cached ones at every size), unaligned tails.
LARGE_NUMEL = (64 << 20) // 4 + 5


def pooled(numel: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return backend_of(dist.group.WORLD).allocate_tensor(numel, dtype=dtype, device=CPU)


def pooled_copy(tensor: torch.Tensor) -> torch.Tensor:
    copy = pooled(tensor.numel(), tensor.dtype)
    copy.copy_(tensor)
    return copy


def pooled_ops_worker(ctx: WorkerContext) -> tuple[int, list[str]]:
    check = Checker(ctx.rank)
    ctx.init("monarch")
    n = ctx.world_size
    backend = backend_of(dist.group.WORLD)
    check.true("supports CPU tensors", backend.supports_tensor_alloc(CPU))
    check.true("leaves CUDA tensors to their allocator", not backend.supports_tensor_alloc(torch.device("cuda", 0)))
    tensor = pooled(1000, torch.bfloat16)
    check.true(
        "allocate_tensor's size, dtype and device",
        (tensor.shape, tensor.dtype, tensor.device) == (torch.Size([1000]), torch.bfloat16, CPU),
        f"{tensor.shape} {tensor.dtype} {tensor.device}",
    )
    check.true("its block is named while it lives", bool(pool_names_of(os.getpid())), str(os.listdir("/dev/shm")))
    for bad, kwargs in (("a CUDA device", {"device": torch.device("cuda", 0)}), ("a negative size", {"size": -1})):
        args: dict[str, Any] = {"size": 10, "dtype": torch.float32, "device": CPU, **kwargs}
        try:
            backend.allocate_tensor(args["size"], dtype=args["dtype"], device=args["device"])
            check.fail(f"allocate_tensor for {bad}", "did not raise")
        except ValueError as error:
            check.true(f"allocate_tensor for {bad} says why", "allocate_tensor" in str(error), str(error))

    for numel in (1 << 18, LARGE_NUMEL):
        inputs = [rank_input(rank, numel, torch.float32, 5) for rank in range(n)]
        before = torch_monarch._C.direct_ops()
        data = pooled_copy(inputs[ctx.rank])
        dist.all_reduce(data)
        check.close(f"all_reduce of {numel}", data, reference_reduce(inputs, "SUM"))

        block = numel // n
        whole = [x[: block * n] for x in inputs]
        mine = torch.empty(block)
        source = pooled_copy(whole[ctx.rank])
        dist.reduce_scatter_tensor(mine, source)
        check.close(f"reduce_scatter_tensor of {numel}", mine, reference_reduce(whole, "SUM").view(n, block)[ctx.rank])
        check.close(f"reduce_scatter_tensor of {numel} leaves its input", source, whole[ctx.rank])

        # As FSDP2 calls it: the input is this rank's block of the output.
        gathered = pooled(block * n)
        gathered.view(n, block)[ctx.rank].copy_(whole[ctx.rank].view(n, block)[0])
        dist.all_gather_into_tensor(gathered, gathered.view(n, block)[ctx.rank])
        check.close(
            f"all_gather_into_tensor of {numel} in place", gathered, torch.cat([x.view(n, block)[0] for x in whole])
        )
        check.true(
            f"the three ops of {numel} ran in place",
            torch_monarch._C.direct_ops() - before == 3,
            f"{torch_monarch._C.direct_ops() - before} did",
        )
        # Out of place: a pooled output takes every rank's block written into
        # it (an ordinary input), a pooled input is read where it lies (an
        # ordinary output).
        expected = torch.cat([x.view(n, block)[0] for x in whole])
        before = torch_monarch._C.direct_ops()
        into_pooled = pooled(block * n)
        dist.all_gather_into_tensor(into_pooled, whole[ctx.rank].view(n, block)[0].clone())
        check.close(f"all_gather_into_tensor of {numel} into a pooled output", into_pooled, expected)
        from_pooled = torch.empty(block * n)
        dist.all_gather_into_tensor(from_pooled, pooled_copy(whole[ctx.rank].view(n, block)[0]))
        check.close(f"all_gather_into_tensor of {numel} from a pooled input", from_pooled, expected)
        check.true(
            f"both all_gathers of {numel} ran without the slots",
            torch_monarch._C.direct_ops() - before == 2,
            f"{torch_monarch._C.direct_ops() - before} did",
        )
        del data, source, gathered, into_pooled

    # bfloat16, combined in float before it is rounded, as through the slots.
    halves = [rank_input(rank, LARGE_NUMEL // n * n, torch.bfloat16, 6) for rank in range(n)]
    mine = torch.empty(LARGE_NUMEL // n, dtype=torch.bfloat16)
    dist.reduce_scatter_tensor(mine, pooled_copy(halves[ctx.rank]))
    check.close(
        "reduce_scatter_tensor in bfloat16", mine, reference_reduce(halves, "SUM").view(n, -1)[ctx.rank], op="SUM"
    )

    # One rank's tensor is ordinary memory: no rank maps every peer's, and
    # they read and write them with cross-memory copies instead.
    inputs = [rank_input(rank, 1 << 18, torch.float32, 7) for rank in range(n)]
    before = torch_monarch._C.direct_ops(), torch_monarch._C.cross_memory_ops()
    data = inputs[0].clone() if ctx.rank == 0 else pooled_copy(inputs[ctx.rank])
    dist.all_reduce(data)
    check.close("all_reduce, one tensor not pooled", data, reference_reduce(inputs, "SUM"))
    after = torch_monarch._C.direct_ops(), torch_monarch._C.cross_memory_ops()
    took = 1 if ranks_reach_each_other(ctx) else 0  # else the slots
    check.true("it took the cross-memory copies", after == (before[0], before[1] + took), f"{before} -> {after}")

    # A freed block serves the next tensor of its size; the peers' mappings of it stay right.
    first = pooled(1 << 18)
    blocks = len(pool_names_of(os.getpid()))
    del first
    again = pooled(1 << 18)
    check.true("a freed block is reused", len(pool_names_of(os.getpid())) == blocks, str(pool_names_of(os.getpid())))
    again.copy_(inputs[ctx.rank])
    dist.all_reduce(again)
    check.close("all_reduce on a reused block", again, reference_reduce(inputs, "SUM"))
    dist.destroy_process_group()
    return check.report()


def test_pooled_tensors_run_in_place() -> None:
    assert_all_passed(run_workers_ok(pooled_ops_worker, 3, timeout=240), min_checks=20)


def test_kill_during_pooled_allreduces() -> None:
    """The victim dies while its peers read and write its tensor."""
    assert_killed_and_named(run_workers(kill_worker, 3, "", "pooled_all_reduce", timeout=60))


def left_behind_worker(ctx: WorkerContext) -> int:
    """Rank 1 allocates a pooled tensor and dies by SIGKILL; rank 0 returns its pid."""
    ctx.init("monarch")
    if ctx.rank == 1:
        pooled(1 << 16)
        ctx.store().set("victim", str(os.getpid()))
        os.kill(os.getpid(), signal.SIGKILL)
    victim = int(ctx.store().get("victim"))
    wait_until(lambda: process_state(victim) in (None, "Z"), 10.0, "rank 1 to die")
    return victim


def next_group_worker(ctx: WorkerContext, victim: int) -> tuple[int, list[str]]:
    check = Checker(ctx.rank)
    check.true("the victim's pool name is there before", bool(pool_names_of(victim)))
    ctx.init("monarch")
    tensor = torch.ones(1 << 20)
    dist.all_reduce(tensor)  # through shared memory: the group sets up its segments
    check.true("the next group removed it", not pool_names_of(victim), str(pool_names_of(victim)))
    dist.destroy_process_group()
    return check.report()


def test_pool_names_of_a_killed_process_are_removed() -> None:
    results = run_workers(left_behind_worker, 2, timeout=60)
    assert results[1].exit_code == -signal.SIGKILL, results[1]
    assert results[0].ok, results[0]
    victim = results[0].value
    assert_all_passed(run_workers_ok(next_group_worker, 2, victim, timeout=60), min_checks=2)


def exiting_worker(ctx: WorkerContext) -> int:
    ctx.init("monarch")
    data = pooled(1 << 18)
    data.fill_(1.0)
    dist.all_reduce(data)
    dist.destroy_process_group()
    return os.getpid()


def test_a_process_that_exits_leaves_no_pool_name() -> None:
    pids = run_workers_ok(exiting_worker, 2, timeout=60)
    left = [name for pid in pids for name in pool_names_of(pid)]
    assert not left, left
