"""Stream semantics of GPU ops: the communicator's stream is ordered after the
caller's stream by events, wait() orders the caller's stream after the op
without the host waiting, and the future completes when the GPU is done.
A spinning kernel keeps the caller's stream busy to make the order visible.
"""

from __future__ import annotations

import time
from typing import Iterator

import pytest
import torch
import torch.distributed as dist

import torch_monarch  # noqa: F401 - registers "monarch"
from gpu_helpers import premul_sum, spin

pytestmark = pytest.mark.cuda


@pytest.fixture(scope="module", autouse=True)
def world() -> Iterator[None]:
    torch.cuda.set_device(0)
    dist.init_process_group("monarch", store=dist.HashStore(), rank=0, world_size=1)
    # The communicator and every kernel launched in a timed section exist
    # before timing: CUDA loads a kernel lazily at its first launch, and the
    # load waits for the GPU, which would look like a host sync in wait().
    x = torch.ones(4, device="cuda")
    dist.all_reduce(x)
    dist.all_gather_into_tensor(torch.empty_like(x), x)
    torch.mul(x, 2, out=torch.empty_like(x))
    torch.cuda.synchronize()
    yield
    dist.destroy_process_group()


def test_wait_orders_streams_without_host_sync() -> None:
    x = torch.zeros(1 << 20, device="cuda")
    out = torch.empty_like(x)
    # Allocated before the spin: a fresh cudaMalloc behind it would make the
    # host wait for the GPU whatever the backend does.
    doubled = torch.empty_like(out)
    spin(1.0)
    x.fill_(7.0)  # runs after the spin, on the caller's stream
    started = time.monotonic()
    work = dist.all_gather_into_tensor(out, x, async_op=True)
    work.wait()
    torch.mul(out, 2, out=doubled)  # queued on the caller's stream after wait()
    elapsed = time.monotonic() - started
    assert elapsed < 0.3, f"launch + wait() took {elapsed:.3f} s: the host waited for the GPU"
    assert not work.is_completed(), "the op cannot be done while the caller's stream still spins"
    torch.cuda.synchronize()
    assert out.eq(7.0).all(), "the op read its input before the caller's stream wrote it"
    assert doubled.eq(14.0).all(), "work after wait() ran before the op"


def test_side_stream_keeps_running() -> None:
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        x = torch.full((1 << 18,), 3.0, device="cuda")
        spin(0.5)
        x.mul_(2.0)  # 6
        work = dist.all_reduce(x, op=premul_sum(2.0), async_op=True)  # 12
        work.wait()
        x.add_(1.0)  # 13, after the op
        y = x * 10  # 130
    torch.cuda.synchronize()
    assert x.eq(13.0).all() and y.eq(130.0).all()


def test_future_completes_when_the_gpu_is_done() -> None:
    x = torch.ones(1024, device="cuda")
    spin(1.0)
    started = time.monotonic()
    work = dist.all_reduce(x, async_op=True)
    future = work.get_future()
    assert not future.done(), "the future completed before the GPU ran the op"
    future.wait()
    waited = time.monotonic() - started
    assert 0.5 < waited < 5.0, f"future.wait() returned after {waited:.3f} s; the GPU needed about 1 s"
    assert work.is_completed()
    assert x.eq(1.0).all()


def test_many_ops_in_flight() -> None:
    tensors = [torch.full((4096,), float(i), device="cuda") for i in range(64)]
    spin(0.2)
    works = [dist.all_reduce(t, async_op=True) for t in tensors]
    for work in works:
        work.wait()
    torch.cuda.synchronize()
    for i, t in enumerate(tensors):
        assert t.eq(float(i)).all()
    deadline = time.monotonic() + 5
    while not all(w.get_future().done() for w in works) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert all(w.get_future().done() for w in works)
