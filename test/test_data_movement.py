"""Collectives that move data without reducing it, against local references:
broadcast, all_gather (list, into tensor, coalesced), gather, scatter,
all_to_all (list, single with even and uneven splits) and barrier; every
dtype, sizes 0/1/odd/large, every root, non-contiguous tensors.
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from monarch_groups import TRANSPORTS, default_and_ring_groups, transport_env
from multiproc import WorkerContext, run_workers_ok
from reference import ALL_DTYPES, SMALL_SIZES, Checker, assert_all_passed, large_numel, rank_input


def _sizes(dtype: torch.dtype) -> tuple[int, ...]:
    return SMALL_SIZES + (large_numel(dtype),)


def broadcast_worker(ctx: WorkerContext) -> tuple[int, list[str]]:
    check = Checker(ctx.rank)
    world = ctx.world_size
    for group_name, group in default_and_ring_groups(ctx).items():
        for root in range(world):
            for seed, dtype in enumerate(ALL_DTYPES):
                sizes = _sizes(dtype) if group_name == "default" else SMALL_SIZES
                for numel in sizes:
                    expected = rank_input(root, numel, dtype, seed)
                    tensor = expected.clone() if ctx.rank == root else torch.zeros(numel, dtype=dtype)
                    dist.broadcast(tensor, src=root, group=group)
                    check.close(f"{group_name} root={root} {dtype} numel={numel}", tensor, expected)
            # Non-contiguous: a transposed view receives in place.
            expected = rank_input(root, 30 * 7, torch.float32, 1).view(30, 7).t()
            tensor = expected.clone(memory_format=torch.preserve_format) if ctx.rank == root else torch.zeros(30, 7).t()
            dist.broadcast(tensor, src=root, group=group)
            check.close(f"{group_name} root={root} transposed", tensor, expected)
    return check.report()


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_broadcast_every_root_dtype_and_size(transport: str) -> None:
    assert_all_passed(run_workers_ok(broadcast_worker, 3, env=transport_env(transport)), min_checks=200)


def all_gather_worker(ctx: WorkerContext) -> tuple[int, list[str]]:
    check = Checker(ctx.rank)
    world = ctx.world_size
    for group_name, group in default_and_ring_groups(ctx).items():
        for seed, dtype in enumerate(ALL_DTYPES):
            sizes = _sizes(dtype) if group_name == "default" else SMALL_SIZES
            for numel in sizes:
                label = f"{group_name} {dtype} numel={numel}"
                inputs = [rank_input(rank, numel, dtype, seed) for rank in range(world)]
                outputs = [torch.empty(numel, dtype=dtype) for _ in range(world)]
                dist.all_gather(outputs, inputs[ctx.rank], group=group)
                for rank in range(world):
                    check.close(f"all_gather {label} from {rank}", outputs[rank], inputs[rank])
                output = torch.empty(world * numel, dtype=dtype)
                dist.all_gather_into_tensor(output, inputs[ctx.rank], group=group)
                check.close(f"all_gather_into_tensor {label}", output, torch.cat(inputs))
                # In place, as FSDP calls it: the input is this rank's block of the output.
                output = torch.zeros(world * numel, dtype=dtype)
                mine = output.narrow(0, ctx.rank * numel, numel)
                mine.copy_(inputs[ctx.rank])
                dist.all_gather_into_tensor(output, mine, group=group)
                check.close(f"in-place all_gather_into_tensor {label}", output, torch.cat(inputs))
        # Coalesced: several tensors of different shapes and dtypes per rank.
        shapes = [(5,), (0,), (2, 3), (1023,)]
        dtypes = [torch.float32, torch.int64, torch.bfloat16, torch.bool]
        per_rank = [
            [rank_input(rank, int(torch.Size(shape).numel()), dtype, i).view(shape) for i, (shape, dtype) in enumerate(zip(shapes, dtypes))]
            for rank in range(world)
        ]
        # all_gather_coalesced needs one dtype per call; run one call per dtype group.
        for i in range(len(shapes)):
            outputs = [[torch.empty(shapes[i], dtype=dtypes[i])] for _ in range(world)]
            dist.all_gather_coalesced(outputs, [per_rank[ctx.rank][i]], group=group)
            for rank in range(world):
                check.close(f"{group_name} all_gather_coalesced {i} from {rank}", outputs[rank][0], per_rank[rank][i])
        inputs = [per_rank[ctx.rank][0], per_rank[ctx.rank][0] * 2, per_rank[ctx.rank][0][:1]]
        outputs = [[torch.empty_like(t) for t in inputs] for _ in range(world)]
        dist.all_gather_coalesced(outputs, inputs, group=group)
        for rank in range(world):
            theirs = per_rank[rank][0]
            for got, expected in zip(outputs[rank], [theirs, theirs * 2, theirs[:1]]):
                check.close(f"{group_name} all_gather_coalesced 3 tensors from {rank}", got, expected)
    # Non-contiguous input and outputs.
    inputs = [rank_input(rank, 12 * 5, torch.float64, 3).view(12, 5).t() for rank in range(world)]
    outputs = [torch.empty(12, 5, dtype=torch.float64).t() for _ in range(world)]
    dist.all_gather(outputs, inputs[ctx.rank])
    for rank in range(world):
        check.close(f"transposed all_gather from {rank}", outputs[rank], inputs[rank])
    output = torch.empty(world * 5, 12, dtype=torch.float64)
    dist.all_gather_into_tensor(output, inputs[ctx.rank])
    check.close("transposed all_gather_into_tensor", output, torch.cat(inputs))
    return check.report()


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_all_gather_variants(transport: str) -> None:
    assert_all_passed(run_workers_ok(all_gather_worker, 3, env=transport_env(transport)), min_checks=300)


def gather_scatter_worker(ctx: WorkerContext) -> tuple[int, list[str]]:
    check = Checker(ctx.rank)
    world = ctx.world_size
    for group_name, group in default_and_ring_groups(ctx).items():
        for root in range(world):
            for seed, dtype in enumerate(ALL_DTYPES):
                sizes = _sizes(dtype) if group_name == "default" and root == 0 else SMALL_SIZES
                for numel in sizes:
                    label = f"{group_name} root={root} {dtype} numel={numel}"
                    inputs = [rank_input(rank, numel, dtype, seed) for rank in range(world)]
                    gathered = [torch.empty(numel, dtype=dtype) for _ in range(world)] if ctx.rank == root else None
                    dist.gather(inputs[ctx.rank], gathered, dst=root, group=group)
                    if gathered is not None:
                        for rank in range(world):
                            check.close(f"gather {label} from {rank}", gathered[rank], inputs[rank])
                    pieces = [rank_input(root, numel, dtype, seed * 31 + rank) for rank in range(world)]
                    output = torch.empty(numel, dtype=dtype)
                    dist.scatter(output, pieces if ctx.rank == root else None, src=root, group=group)
                    check.close(f"scatter {label}", output, pieces[ctx.rank])
    # Non-contiguous.
    root = world - 1
    inputs = [rank_input(rank, 4 * 9, torch.int32, 2).view(4, 9).t() for rank in range(world)]
    gathered = [torch.empty(4, 9, dtype=torch.int32).t() for _ in range(world)] if ctx.rank == root else None
    dist.gather(inputs[ctx.rank], gathered, dst=root)
    if gathered is not None:
        for rank in range(world):
            check.close(f"transposed gather from {rank}", gathered[rank], inputs[rank])
    output = torch.empty(4, 9, dtype=torch.int32).t()
    dist.scatter(output, inputs if ctx.rank == root else None, src=root)
    check.close("transposed scatter", output, inputs[ctx.rank])
    return check.report()


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_gather_and_scatter_every_root(transport: str) -> None:
    assert_all_passed(run_workers_ok(gather_scatter_worker, 3, env=transport_env(transport)), min_checks=300)


def _uneven_splits(world: int, numel_scale: int) -> list[list[int]]:
    """splits[src][dst]: rows src sends to dst; includes zeros."""
    return [[((src * 7 + dst * 3) % 5) * numel_scale for dst in range(world)] for src in range(world)]


def all_to_all_worker(ctx: WorkerContext) -> tuple[int, list[str]]:
    check = Checker(ctx.rank)
    world = ctx.world_size
    me = ctx.rank
    for group_name, group in default_and_ring_groups(ctx).items():
        for seed, dtype in enumerate(ALL_DTYPES):
            for rows in (0, 1, 341, large_numel(dtype) // world):
                if group_name == "ring" and rows > 341:
                    continue
                label = f"{group_name} {dtype} rows={rows}"
                # Even: row block [dst] of src's input goes to dst.
                inputs = [rank_input(src, world * rows * 2, dtype, seed).view(world * rows, 2) for src in range(world)]
                output = torch.empty(world * rows, 2, dtype=dtype)
                dist.all_to_all_single(output, inputs[me], group=group)
                expected = torch.cat([inputs[src].view(world, rows, 2)[me] for src in range(world)])
                check.close(f"all_to_all_single even {label}", output, expected)
                # List form.
                outputs = [torch.empty(rows, dtype=dtype) for _ in range(world)]
                pieces = [[rank_input(src, rows, dtype, seed * 17 + dst) for dst in range(world)] for src in range(world)]
                dist.all_to_all(outputs, pieces[me], group=group)
                for src in range(world):
                    check.close(f"all_to_all {label} from {src}", outputs[src], pieces[src][me])
            # Uneven split sizes (with empty blocks).
            for scale in (1, 3):
                splits = _uneven_splits(world, scale)
                inputs = [rank_input(src, sum(splits[src]) * 3, dtype, seed).view(-1, 3) for src in range(world)]
                recv_splits = [splits[src][me] for src in range(world)]
                output = torch.empty(sum(recv_splits), 3, dtype=dtype)
                dist.all_to_all_single(
                    output, inputs[me], output_split_sizes=recv_splits, input_split_sizes=splits[me], group=group
                )
                expected = torch.cat(
                    [inputs[src].split(splits[src])[me] for src in range(world)]
                )
                check.close(f"all_to_all_single uneven {group_name} {dtype} scale={scale}", output, expected)
    # Non-contiguous input.
    inputs = [rank_input(src, 6 * world * 2, torch.float32, 9).view(2, world * 6).t() for src in range(world)]
    output = torch.empty(world * 6, 2)
    dist.all_to_all_single(output, inputs[me])
    expected = torch.cat([inputs[src].reshape(world, 6, 2)[me] for src in range(world)])
    check.close("transposed all_to_all_single", output, expected)
    return check.report()


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_all_to_all_even_and_uneven(transport: str) -> None:
    assert_all_passed(run_workers_ok(all_to_all_worker, 3, env=transport_env(transport)), min_checks=200)


def barrier_worker(ctx: WorkerContext) -> tuple[int, list[str]]:
    """A rank that passed barrier k knows every rank reached it: each rank
    writes its arrival in the store before the barrier and checks the
    others' after it."""
    check = Checker(ctx.rank)
    ctx.init("monarch")
    store = ctx.store()
    for round_ in range(5):
        store.set(f"arrived/{round_}/{ctx.rank}", "1")
        dist.barrier()
        arrived = [store.check([f"arrived/{round_}/{rank}"]) for rank in range(ctx.world_size)]
        check.true(f"barrier round {round_}", all(arrived), f"arrivals seen: {arrived}")
    return check.report()


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_barrier(transport: str) -> None:
    assert_all_passed(run_workers_ok(barrier_worker, 4, env=transport_env(transport)), min_checks=5)
