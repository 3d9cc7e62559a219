"""Helpers for the GPU tests: keeping a stream busy, and world-1 groups."""

from __future__ import annotations

import functools
from datetime import timedelta

import torch
import torch.distributed as dist

import torch_monarch


@functools.lru_cache(maxsize=None)
def cycles_per_second() -> float:
    """How many torch.cuda._sleep cycles the GPU spins per second (measured once)."""
    torch.cuda._sleep(1_000_000)  # warm up
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    cycles = 100_000_000
    start.record()
    torch.cuda._sleep(cycles)
    end.record()
    end.synchronize()
    return cycles / (start.elapsed_time(end) / 1000.0)


def spin(seconds: float) -> None:
    """Keeps the current stream busy for about ``seconds`` without the host waiting."""
    torch.cuda._sleep(int(seconds * cycles_per_second()))


def premul_sum(factor: float) -> dist.ReduceOp:
    make = getattr(dist, "_make_nccl_premul_sum", None) or getattr(dist, "_make_premul_sum")
    return make(factor)


def monarch_group(timeout: timedelta) -> dist.ProcessGroup:
    """A new monarch group over the default group's ranks with its own op timeout."""
    return dist.new_group(backend="monarch", pg_options=torch_monarch.Options(timeout=timeout))


def cuda_backend(group: dist.ProcessGroup) -> object:
    return group._get_backend(torch.device("cuda"))
