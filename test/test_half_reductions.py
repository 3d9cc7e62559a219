"""Half-precision reductions (float16, bfloat16) are computed in float.

- Every bit pattern of the type comes through a sum with zeros and a product
  with ones unchanged (NaNs stay NaN, -0 + 0 is +0 as in float), on the
  shared-memory path and over TCP: the vectorised conversions to float and
  back round to nearest even exactly as torch's do.
- Where one rank reduces every rank's input at once (the shared-memory
  allreduce), the inputs are combined in float and rounded once: the result
  is torch's float32 sum rounded to the half type. Rounding after each
  addition would give 256 + 1 + 1 + 1 = 256 in bfloat16; the answer is 260.
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from monarch_groups import transport_env
from multiproc import WorkerContext, run_workers_ok
from reference import Checker, assert_all_passed

HALF_DTYPES = ["float16", "bfloat16"]


def _every_bit_pattern(dtype: torch.dtype) -> torch.Tensor:
    return torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16).view(dtype)


def _same_bits(check: Checker, label: str, got: torch.Tensor, expected: torch.Tensor) -> None:
    """Equal bit for bit, except that a NaN only has to be a NaN."""
    nan = expected.isnan()
    check.true(f"{label}: NaN where expected", torch.equal(got.isnan(), nan))
    mismatched = (got.view(torch.int16) != expected.view(torch.int16)) & ~nan
    check.true(
        f"{label}: bits",
        not bool(mismatched.any()),
        f"{int(mismatched.sum())} differ, first inputs {expected[mismatched][:4].tolist()} -> {got[mismatched][:4].tolist()}",
    )


def bit_patterns_worker(ctx: WorkerContext, dtype_name: str) -> tuple[int, list[str]]:
    dtype = getattr(torch, dtype_name)
    check = Checker(ctx.rank)
    ctx.init("monarch")
    patterns = _every_bit_pattern(dtype)
    for op, neutral in ((dist.ReduceOp.SUM, 0.0), (dist.ReduceOp.PRODUCT, 1.0)):
        tensor = patterns.clone() if ctx.rank == 0 else torch.full_like(patterns, neutral)
        dist.all_reduce(tensor, op=op)
        expected = (patterns.float() + 0.0 if neutral == 0.0 else patterns.float() * 1.0).to(dtype)
        _same_bits(check, f"{dtype_name} {op}", tensor, expected)
    return check.report()


@pytest.mark.parametrize("transport", ["shm", "tcp"])
@pytest.mark.parametrize("dtype_name", HALF_DTYPES)
def test_every_bit_pattern_round_trips(dtype_name: str, transport: str) -> None:
    assert_all_passed(run_workers_ok(bit_patterns_worker, 2, dtype_name, env=transport_env(transport)), min_checks=4)


def rounded_once_worker(ctx: WorkerContext, dtype_name: str) -> tuple[int, list[str]]:
    dtype = getattr(torch, dtype_name)
    check = Checker(ctx.rank)
    ctx.init("monarch")
    n = ctx.world_size

    # The smallest case where rounding at each step loses: half a unit in
    # the last place added n - 1 times.
    big = 256.0 if dtype == torch.bfloat16 else 2048.0
    tensor = torch.full((1000,), big if ctx.rank == 0 else 1.0, dtype=dtype)
    dist.all_reduce(tensor)
    expected = torch.tensor(big + n - 1).to(dtype)
    check.true(f"{dtype_name} {big:g} + 1 x {n - 1}", bool((tensor == expected).all()), f"got {tensor[:3].tolist()}")

    # Random values whose float32 sums are exact in any order, so that the
    # reference is the one rounding: multiples of 1/64 below 2^10.
    inputs = []
    for rank in range(n):
        generator = torch.Generator().manual_seed(100 + rank)
        inputs.append((torch.randint(-65536, 65536, (4099,), generator=generator).float() / 64).to(dtype))
    for op, combine in ((dist.ReduceOp.SUM, torch.sum), (dist.ReduceOp.MAX, torch.amax)):
        tensor = inputs[ctx.rank].clone()
        dist.all_reduce(tensor, op=op)
        expected = combine(torch.stack([x.float() for x in inputs]), dim=0).to(dtype)
        check.close(f"{dtype_name} {op} of random inputs", tensor, expected, tolerance=(0.0, 0.0))
    return check.report()


@pytest.mark.parametrize("dtype_name", HALF_DTYPES)
def test_shared_memory_allreduce_rounds_once(dtype_name: str) -> None:
    reports = run_workers_ok(rounded_once_worker, 4, dtype_name, env=transport_env("shm"))
    assert_all_passed(reports, min_checks=3)
