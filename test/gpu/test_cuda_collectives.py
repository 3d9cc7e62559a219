"""Every collective on CUDA tensors through the monarch backend, at world 1 (one
process, one GPU), next to host tensors in the same group. At world 1 every
collective has a known result, so each checks its output exactly, including
for non-contiguous and zero-size tensors and every dtype NCCL can reduce.
"""

from __future__ import annotations

from typing import Iterator

import pytest
import torch
import torch.distributed as dist

import torch_monarch  # noqa: F401 - registers "monarch"
from gpu_helpers import premul_sum

pytestmark = pytest.mark.cuda

DTYPES = [
    torch.float32, torch.float64, torch.float16, torch.bfloat16,
    torch.int8, torch.uint8, torch.int32, torch.int64, torch.bool, torch.complex64,
]  # fmt: skip


@pytest.fixture(scope="module", autouse=True)
def world() -> Iterator[None]:
    torch.cuda.set_device(0)
    dist.init_process_group("monarch", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def sample(dtype: torch.dtype, n: int = 1000) -> torch.Tensor:
    values = torch.arange(n, device="cuda") % 7
    if dtype == torch.bool:
        return values > 2
    return values.to(dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_all_reduce_every_dtype_and_op(dtype: torch.dtype) -> None:
    ops = [dist.ReduceOp.SUM]
    if not dtype.is_complex:  # torch itself refuses the others on complex tensors
        ops += [dist.ReduceOp.PRODUCT, dist.ReduceOp.MIN, dist.ReduceOp.MAX]
    if dtype.is_floating_point or dtype.is_complex:
        ops.append(dist.ReduceOp.AVG)
    for op in ops:
        x = sample(dtype)
        dist.all_reduce(x, op=op)
        torch.testing.assert_close(x, sample(dtype), msg=f"{dtype} {op}")
    if dtype.is_floating_point:
        x = sample(dtype)
        dist.all_reduce(x, op=premul_sum(2.0))
        torch.testing.assert_close(x, sample(dtype) * 2)


def test_reductions_nccl_cannot_do_raise_at_once() -> None:
    with pytest.raises(TypeError):
        dist.all_reduce(torch.ones(4, dtype=torch.int16, device="cuda"))
    with pytest.raises((TypeError, ValueError)):
        dist.all_reduce(torch.ones(4, dtype=torch.int32, device="cuda"), op=dist.ReduceOp.BAND)
    with pytest.raises(TypeError):
        dist.all_reduce(torch.ones(4, dtype=torch.int32, device="cuda"), op=dist.ReduceOp.AVG)
    # The group is still usable: bad arguments never break it.
    x = torch.ones(4, device="cuda")
    dist.all_reduce(x)
    assert x.tolist() == [1.0] * 4


def test_non_contiguous_and_zero_size() -> None:
    base = torch.arange(12.0, device="cuda").reshape(3, 4)
    view = base.t()  # non-contiguous
    dist.all_reduce(view, op=premul_sum(3.0))
    torch.testing.assert_close(base, torch.arange(12.0, device="cuda").reshape(3, 4) * 3)
    empty = torch.empty(0, device="cuda")
    dist.all_reduce(empty)
    dist.broadcast(empty, src=0)
    out = torch.empty(8, device="cuda")[::2]  # strided output
    dist.all_gather_into_tensor(out, torch.arange(4.0, device="cuda"))
    torch.testing.assert_close(out, torch.arange(4.0, device="cuda"))


def test_data_movement() -> None:
    x = torch.arange(10, device="cuda", dtype=torch.float16)
    dist.broadcast(x, src=0)
    torch.testing.assert_close(x, torch.arange(10, device="cuda", dtype=torch.float16))
    y = sample(torch.int64)
    dist.reduce(y, dst=0, op=dist.ReduceOp.MAX)
    torch.testing.assert_close(y, sample(torch.int64))
    gathered = [torch.empty(5, device="cuda")]
    dist.all_gather(gathered, torch.arange(5.0, device="cuda"))
    torch.testing.assert_close(gathered[0], torch.arange(5.0, device="cuda"))
    into = torch.empty(5, device="cuda", dtype=torch.complex64)
    dist.all_gather_into_tensor(into, torch.arange(5, device="cuda").to(torch.complex64))
    torch.testing.assert_close(into, torch.arange(5, device="cuda").to(torch.complex64))
    outs = [[torch.empty(3, device="cuda"), torch.empty(2, device="cuda")]]
    dist.all_gather_coalesced(outs, [torch.ones(3, device="cuda"), torch.full((2,), 7.0, device="cuda")])
    assert outs[0][0].tolist() == [1.0] * 3 and outs[0][1].tolist() == [7.0, 7.0]
    gather_list = [torch.empty(4, device="cuda")]
    dist.gather(torch.full((4,), 2.0, device="cuda"), gather_list, dst=0)
    assert gather_list[0].tolist() == [2.0] * 4
    scattered = torch.empty(4, device="cuda")
    dist.scatter(scattered, [torch.full((4,), 5.0, device="cuda")], src=0)
    assert scattered.tolist() == [5.0] * 4
    rs = torch.empty(6, device="cuda")
    dist.reduce_scatter(rs, [torch.arange(6.0, device="cuda")])
    torch.testing.assert_close(rs, torch.arange(6.0, device="cuda"))
    rst = torch.empty(6, device="cuda", dtype=torch.bfloat16)
    dist.reduce_scatter_tensor(rst, torch.arange(6, device="cuda").to(torch.bfloat16), op=dist.ReduceOp.AVG)
    torch.testing.assert_close(rst, torch.arange(6, device="cuda").to(torch.bfloat16))
    a2a = [torch.empty(3, device="cuda")]
    dist.all_to_all(a2a, [torch.full((3,), 4.0, device="cuda")])
    assert a2a[0].tolist() == [4.0] * 3
    single = torch.empty(6, 2, device="cuda")
    dist.all_to_all_single(single, torch.arange(12.0, device="cuda").reshape(6, 2))
    torch.testing.assert_close(single, torch.arange(12.0, device="cuda").reshape(6, 2))
    dist.all_to_all_single(single, torch.ones(6, 2, device="cuda"), output_split_sizes=[6], input_split_sizes=[6])
    assert single.sum().item() == 12.0
    dist.barrier(device_ids=[0])


def test_coalesced() -> None:
    tensors = [torch.ones(3, device="cuda"), torch.full((5,), 2.0, device="cuda")]
    with dist._coalescing_manager(async_ops=True) as manager:
        for t in tensors:
            dist.all_reduce(t)
    manager.wait()
    assert tensors[0].tolist() == [1.0] * 3 and tensors[1].tolist() == [2.0] * 5
    outputs = [torch.empty(3, device="cuda"), torch.empty(4, device="cuda")]
    inputs = [torch.arange(3.0, device="cuda"), torch.arange(4.0, device="cuda")]
    with dist._coalescing_manager(async_ops=True) as manager:
        for out, inp in zip(outputs, inputs):
            dist.all_gather_into_tensor(out, inp)
    manager.wait()
    for out, inp in zip(outputs, inputs):
        torch.testing.assert_close(out, inp)
    reduced = [torch.empty(3, device="cuda"), torch.empty(4, device="cuda")]
    with dist._coalescing_manager(async_ops=True) as manager:
        for out, inp in zip(reduced, inputs):
            dist.reduce_scatter_tensor(out, inp)
    manager.wait()
    for out, inp in zip(reduced, inputs):
        torch.testing.assert_close(out, inp)


def test_point_to_point_needs_a_peer() -> None:
    with pytest.raises(ValueError):
        dist.send(torch.ones(1, device="cuda"), dst=0)


def test_host_and_gpu_tensors_in_one_group() -> None:
    host = torch.ones(4)
    gpu = torch.ones(4, device="cuda")
    dist.all_reduce(host)
    dist.all_reduce(gpu)
    assert host.tolist() == [1.0] * 4 and gpu.tolist() == [1.0] * 4
    with pytest.raises((ValueError, RuntimeError)):
        dist.all_gather([torch.empty(4)], gpu)  # a host output for a GPU input


def test_work_and_future() -> None:
    x = torch.full((16,), 3.0, device="cuda")
    work = dist.all_reduce(x, async_op=True)
    work.wait()
    future = work.get_future()
    value = future.wait()
    assert isinstance(value, list) and value[0] is not None
    torch.cuda.synchronize()
    assert work.is_completed()
    assert x.tolist() == [3.0] * 16
