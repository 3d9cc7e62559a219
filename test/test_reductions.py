"""Reducing collectives against local references: all_reduce (+ coalesced),
reduce at every root, reduce_scatter and reduce_scatter_tensor, over every
dtype and every reduce op that makes sense for it.

Each test is one multi-process run that sweeps its whole matrix twice: on
the default group (latency algorithms below 64 KiB, the chunked ring above)
and on a group whose options force the ring with tiny chunks at every size.
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from monarch_groups import TRANSPORTS, default_and_ring_groups, transport_env
from multiproc import WorkerContext, run_workers_ok
from reference import (
    ALL_DTYPES,
    SMALL_SIZES,
    Checker,
    assert_all_passed,
    large_numel,
    make_reduce_op,
    rank_input,
    reduce_ops_for,
    reference_reduce,
)


def _all_reduce(tensor: torch.Tensor, op: str, group: dist.ProcessGroup) -> None:
    """dist.all_reduce; complex tensors go through the ProcessGroup API,
    since torch's Python layer would hand the backend a real view (or refuse
    the op), so the backend's complex kernels would not run."""
    reduce_op = make_reduce_op(op)
    if tensor.is_complex():
        options = dist.AllreduceOptions()
        options.reduceOp = reduce_op
        group.allreduce([tensor], options).wait()
    else:
        dist.all_reduce(tensor, op=reduce_op, group=group)


def _all_inputs(world: int, numel: int, dtype: torch.dtype, seed: int) -> list[torch.Tensor]:
    return [rank_input(rank, numel, dtype, seed) for rank in range(world)]


def all_reduce_worker(ctx: WorkerContext) -> tuple[int, list[str]]:
    check = Checker(ctx.rank)
    world = ctx.world_size
    for group_name, group in default_and_ring_groups(ctx).items():
        for seed, dtype in enumerate(ALL_DTYPES):
            for op in reduce_ops_for(dtype):
                for numel in SMALL_SIZES:
                    inputs = _all_inputs(world, numel, dtype, seed)
                    tensor = inputs[ctx.rank].clone()
                    _all_reduce(tensor, op, group)
                    check.close(f"{group_name} {dtype} {op} numel={numel}", tensor, reference_reduce(inputs, op), op)
        # PREMUL_SUM with the factor as a tensor rather than a float.
        factor = torch.tensor([3.0])
        inputs = _all_inputs(world, 1023, torch.float32, 99)
        tensor = inputs[ctx.rank].clone()
        dist.all_reduce(tensor, op=make_reduce_op("PREMUL_SUM", factor), group=group)
        check.close(f"{group_name} PREMUL_SUM tensor factor", tensor, reference_reduce(inputs, "PREMUL_SUM", factor), "PREMUL_SUM")
        # Complex through dist.all_reduce as users call it (a real view underneath).
        for op in ("SUM", "AVG"):
            inputs = _all_inputs(world, 1023, torch.complex64, 98)
            tensor = inputs[ctx.rank].clone()
            dist.all_reduce(tensor, op=make_reduce_op(op), group=group)
            check.close(f"{group_name} dist.all_reduce complex64 {op}", tensor, reference_reduce(inputs, op), op)
    # Large: every dtype through the ring of the default group; float32 with
    # several MB and every op.
    for seed, dtype in enumerate(ALL_DTYPES):
        for op in reduce_ops_for(dtype) if dtype == torch.float32 else ("SUM", reduce_ops_for(dtype)[-1]):
            numel = large_numel(dtype)
            inputs = _all_inputs(world, numel, dtype, seed)
            tensor = inputs[ctx.rank].clone()
            _all_reduce(tensor, op, dist.group.WORLD)
            check.close(f"large {dtype} {op} numel={numel}", tensor, reference_reduce(inputs, op), op)
    # Non-contiguous: the result must land in the transposed view.
    for numel_rows in (7, 1200):
        inputs = [rank_input(rank, numel_rows * 33, torch.float64, 7).view(numel_rows, 33).t() for rank in range(world)]
        tensor = inputs[ctx.rank].clone(memory_format=torch.preserve_format)
        assert not tensor.is_contiguous()
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
        check.close(f"transposed {tuple(tensor.shape)}", tensor, reference_reduce(inputs, "MAX"))
    return check.report()


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("world_size", [2, 3, 4])
def test_all_reduce_every_dtype_op_and_size(world_size: int, transport: str) -> None:
    assert_all_passed(run_workers_ok(all_reduce_worker, world_size, env=transport_env(transport)), min_checks=300)


def all_reduce_coalesced_worker(ctx: WorkerContext) -> tuple[int, list[str]]:
    check = Checker(ctx.rank)
    world = ctx.world_size
    shapes = [(3,), (0,), (4, 5), (1,), (1023,)]
    for group_name, group in default_and_ring_groups(ctx).items():
        for seed, dtype in enumerate(ALL_DTYPES):
            for op in reduce_ops_for(dtype):
                per_rank = [
                    [rank_input(rank, int(torch.Size(shape).numel()), dtype, seed * 10 + i).view(shape) for i, shape in enumerate(shapes)]
                    for rank in range(world)
                ]
                tensors = [tensor.clone() for tensor in per_rank[ctx.rank]]
                reduce_op = make_reduce_op(op)
                if dtype.is_complex and not dist.supports_complex(reduce_op):
                    options = dist.AllreduceCoalescedOptions()
                    options.reduceOp = reduce_op
                    group.allreduce_coalesced(tensors, options).wait()
                else:
                    dist.all_reduce_coalesced(tensors, op=reduce_op, group=group)
                for i in range(len(shapes)):
                    expected = reference_reduce([per_rank[rank][i] for rank in range(world)], op)
                    check.close(f"{group_name} {dtype} {op} tensor {i}", tensors[i], expected, op)
    # Through the ProcessGroup API as well, async.
    per_rank = [[rank_input(rank, 100_000, torch.float32, 5), rank_input(rank, 17, torch.float32, 6)] for rank in range(world)]
    tensors = [tensor.clone() for tensor in per_rank[ctx.rank]]
    options = dist.AllreduceCoalescedOptions()
    options.reduceOp = dist.ReduceOp.SUM
    dist.group.WORLD.allreduce_coalesced(tensors, options).wait()
    for i in range(2):
        check.close(f"pg api tensor {i}", tensors[i], reference_reduce([p[i] for p in per_rank], "SUM"))
    return check.report()


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_all_reduce_coalesced(transport: str) -> None:
    assert_all_passed(run_workers_ok(all_reduce_coalesced_worker, 3, env=transport_env(transport)), min_checks=200)


def reduce_worker(ctx: WorkerContext) -> tuple[int, list[str]]:
    check = Checker(ctx.rank)
    world = ctx.world_size
    for group_name, group in default_and_ring_groups(ctx).items():
        for root in range(world):
            for seed, dtype in enumerate(ALL_DTYPES):
                for op in reduce_ops_for(dtype):
                    for numel in SMALL_SIZES:
                        inputs = _all_inputs(world, numel, dtype, seed + root)
                        tensor = inputs[ctx.rank].clone()
                        dist.reduce(tensor, dst=root, op=make_reduce_op(op), group=group)
                        label = f"{group_name} root={root} {dtype} {op} numel={numel}"
                        if ctx.rank == root:
                            check.close(label, tensor, reference_reduce(inputs, op), op)
                        else:
                            check.close(label + " (non-root input kept)", tensor, inputs[ctx.rank])
    for root in range(world):
        for dtype in (torch.float32, torch.int64, torch.bfloat16):
            numel = large_numel(dtype)
            inputs = _all_inputs(world, numel, dtype, root)
            tensor = inputs[ctx.rank].clone()
            dist.reduce(tensor, dst=root, op=dist.ReduceOp.SUM)
            if ctx.rank == root:
                check.close(f"large root={root} {dtype}", tensor, reference_reduce(inputs, "SUM"))
            else:
                check.close(f"large root={root} {dtype} (non-root input kept)", tensor, inputs[ctx.rank])
    inputs = [rank_input(rank, 40 * 9, torch.int32, 3).view(40, 9).t() for rank in range(world)]
    tensor = inputs[ctx.rank].clone(memory_format=torch.preserve_format)
    dist.reduce(tensor, dst=world - 1, op=dist.ReduceOp.MIN)
    if ctx.rank == world - 1:
        check.close("transposed", tensor, reference_reduce(inputs, "MIN"))
    return check.report()


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_reduce_every_root(transport: str) -> None:
    assert_all_passed(run_workers_ok(reduce_worker, 3, env=transport_env(transport)), min_checks=500)


def reduce_scatter_worker(ctx: WorkerContext) -> tuple[int, list[str]]:
    """reduce_scatter (list input) and reduce_scatter_tensor (flat input)."""
    check = Checker(ctx.rank)
    world = ctx.world_size
    for group_name, group in default_and_ring_groups(ctx).items():
        for seed, dtype in enumerate(ALL_DTYPES):
            for op in reduce_ops_for(dtype):
                for per_rank in (0, 1, 341):
                    inputs = _all_inputs(world, world * per_rank, dtype, seed)
                    expected = reference_reduce(inputs, op).view(world, per_rank)[ctx.rank]
                    label = f"{group_name} {dtype} {op} per_rank={per_rank}"
                    output = torch.empty(per_rank, dtype=dtype)
                    dist.reduce_scatter_tensor(output, inputs[ctx.rank].clone(), op=make_reduce_op(op), group=group)
                    check.close("reduce_scatter_tensor " + label, output, expected, op)
                    output = torch.empty(per_rank, dtype=dtype)
                    chunks = list(inputs[ctx.rank].clone().view(world, per_rank).unbind(0))
                    dist.reduce_scatter(output, chunks, op=make_reduce_op(op), group=group)
                    check.close("reduce_scatter " + label, output, expected, op)
    for dtype in (torch.float32, torch.complex128, torch.int16):
        per_rank = large_numel(dtype) // world
        inputs = _all_inputs(world, world * per_rank, dtype, 4)
        expected = reference_reduce(inputs, "SUM").view(world, per_rank)[ctx.rank]
        output = torch.empty(per_rank, dtype=dtype)
        dist.reduce_scatter_tensor(output, inputs[ctx.rank])
        check.close(f"large reduce_scatter_tensor {dtype}", output, expected)
        output = torch.empty(per_rank, dtype=dtype)
        dist.reduce_scatter(output, list(inputs[ctx.rank].view(world, per_rank).unbind(0)))
        check.close(f"large reduce_scatter {dtype}", output, expected)
    # Non-contiguous input and output (2-D, transposed).
    inputs = [rank_input(rank, world * 6 * 5, torch.float64, 8).view(world * 6, 5) for rank in range(world)]
    output = torch.empty(5, 6, dtype=torch.float64).t()
    assert not output.is_contiguous()
    dist.reduce_scatter_tensor(output, inputs[ctx.rank].clone())
    expected = reference_reduce(inputs, "SUM").view(world, 6, 5)[ctx.rank]
    check.close("transposed output", output, expected)
    return check.report()


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_reduce_scatter(transport: str) -> None:
    assert_all_passed(run_workers_ok(reduce_scatter_worker, 3, env=transport_env(transport)), min_checks=300)
