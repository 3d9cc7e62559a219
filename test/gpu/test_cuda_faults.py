"""Timeout and abort of GPU ops that cannot finish, at world 1: a spinning kernel
on the caller's stream keeps the op from starting, which is what a collective
stuck on the GPU looks like to the host. (test_cuda_shared_gpu.py has the
multi-process cases, where a peer never joins.)
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Iterator

import pytest
import torch
import torch.distributed as dist

import torch_monarch
from faults import C10D_TIMEOUT_PATTERN
from gpu_helpers import monarch_group, spin

pytestmark = pytest.mark.cuda


@pytest.fixture(scope="module", autouse=True)
def world() -> Iterator[None]:
    torch.cuda.set_device(0)
    dist.init_process_group("monarch", store=dist.HashStore(), rank=0, world_size=1)
    yield
    torch.cuda.synchronize()
    dist.destroy_process_group()


def abort(group: dist.ProcessGroup) -> None:
    if hasattr(group, "abort"):
        group.abort()
    else:
        group._get_backend(torch.device("cuda")).abort()


def test_stuck_op_times_out_and_breaks_the_group() -> None:
    group = monarch_group(timedelta(seconds=2))
    x = torch.ones(16, device="cuda")
    dist.all_reduce(x, group=group)
    torch.cuda.synchronize()
    spin(6.0)
    started = time.monotonic()
    work = dist.all_reduce(x, group=group, async_op=True)
    with pytest.raises(torch_monarch.CollectiveTimeoutError, match=C10D_TIMEOUT_PATTERN):
        work.wait(timeout=timedelta(seconds=30))
    elapsed = time.monotonic() - started
    assert 1.5 < elapsed < 4.5, f"the timeout of 2 s fired after {elapsed:.1f} s"
    # The group stays broken: later ops fail at once with the same error.
    started = time.monotonic()
    with pytest.raises(torch_monarch.CollectiveTimeoutError, match="broken"):
        dist.all_reduce(torch.ones(1, device="cuda"), group=group)
    assert time.monotonic() - started < 1.0
    torch.cuda.synchronize()  # the stream drains: nothing stays stuck


def test_abort_returns_while_an_op_is_stuck() -> None:
    group = monarch_group(timedelta(seconds=60))
    x = torch.ones(16, device="cuda")
    dist.all_reduce(x, group=group)
    torch.cuda.synchronize()
    spin(4.0)
    work = dist.all_reduce(x, group=group, async_op=True)
    started = time.monotonic()
    abort(group)
    took = time.monotonic() - started
    assert took < 11.0, f"abort() took {took:.1f} s"
    with pytest.raises(torch_monarch.AbortedError):
        work.wait(timeout=timedelta(seconds=30))
    with pytest.raises(torch_monarch.AbortedError):
        dist.all_reduce(torch.ones(1, device="cuda"), group=group)
    started = time.monotonic()
    torch.cuda.synchronize()
    assert time.monotonic() - started < 10.0
