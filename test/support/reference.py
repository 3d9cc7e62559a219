"""Worker-side helpers: known per-rank inputs, local reference results, and a
checker that records every mismatch instead of stopping at the first one.

Inputs are small integers (in every dtype), so sums and products over a few
ranks are exact even in float16/bfloat16 and the references can be compared
bit for bit; only AVG and PREMUL_SUM need a tolerance.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

import torch
import torch.distributed as dist

__all__ = [
    "ALL_DTYPES",
    "Checker",
    "LARGE_BYTES",
    "PREMUL_FACTOR",
    "SMALL_SIZES",
    "assert_all_passed",
    "large_numel",
    "make_reduce_op",
    "rank_input",
    "reduce_ops_for",
    "reference_reduce",
]

FLOAT_DTYPES: tuple[torch.dtype, ...] = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
COMPLEX_DTYPES: tuple[torch.dtype, ...] = (torch.complex64, torch.complex128)
INT_DTYPES: tuple[torch.dtype, ...] = (torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64)
ALL_DTYPES: tuple[torch.dtype, ...] = FLOAT_DTYPES + INT_DTYPES + (torch.bool,) + COMPLEX_DTYPES

# Sizes (elements) below the 64 KiB small-message threshold: empty, one, odd.
SMALL_SIZES: tuple[int, ...] = (0, 1, 1023)
# A "large" float32 message: several MB, so each rank's ring block spans
# several 512 KiB chunks.
LARGE_BYTES = 6 * 1024 * 1024
# Other dtypes go just past the 64 KiB small-message threshold (ring path);
# chunking for every dtype is covered by groups with tiny chunks.
MEDIUM_BYTES = 256 * 1024

PREMUL_FACTOR = 0.5


def large_numel(dtype: torch.dtype) -> int:
    """An odd element count above the small-message threshold, so ring blocks
    are uneven: LARGE_BYTES for float32, MEDIUM_BYTES for other dtypes."""
    element_size = torch.empty((), dtype=dtype).element_size()
    return (LARGE_BYTES if dtype == torch.float32 else MEDIUM_BYTES) // element_size + 1


def reduce_ops_for(dtype: torch.dtype) -> list[str]:
    """The reduce ops that make sense for a dtype, by ReduceOp name."""
    if dtype in FLOAT_DTYPES:
        return ["SUM", "AVG", "PRODUCT", "MIN", "MAX", "PREMUL_SUM"]
    if dtype in COMPLEX_DTYPES:
        return ["SUM", "AVG", "PRODUCT"]
    return ["SUM", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR"]


def make_reduce_op(name: str, factor: Optional[float | torch.Tensor] = None) -> dist.ReduceOp:
    if name == "PREMUL_SUM":
        return dist._make_nccl_premul_sum(PREMUL_FACTOR if factor is None else factor)
    return getattr(dist.ReduceOp, name)


def rank_input(rank: int, numel: int, dtype: torch.dtype, seed: int = 0) -> torch.Tensor:
    """Rank `rank`'s deterministic input: small integers (or booleans) in `dtype`."""
    generator = torch.Generator().manual_seed(1_000_003 * seed + rank)
    if dtype == torch.bool:
        return torch.randint(0, 2, (numel,), generator=generator).bool()
    low = 0 if dtype == torch.uint8 else -3
    values = torch.randint(low, 4, (numel,), generator=generator)
    if dtype in COMPLEX_DTYPES:
        imag = torch.randint(-3, 4, (numel,), generator=generator)
        return torch.complex(values.double(), imag.double()).to(dtype)
    return values.to(dtype)


def _wide(dtype: torch.dtype) -> torch.dtype:
    if dtype in COMPLEX_DTYPES:
        return torch.complex128
    if dtype in FLOAT_DTYPES:
        return torch.float64
    return torch.int64


_BITWISE: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "BAND": torch.bitwise_and,
    "BOR": torch.bitwise_or,
    "BXOR": torch.bitwise_xor,
}


def reference_reduce(
    inputs: Sequence[torch.Tensor], op: str, factor: float | torch.Tensor = PREMUL_FACTOR
) -> torch.Tensor:
    """The reduction of the ranks' `inputs` under `op`, computed locally.

    Works in a wide dtype and casts back, which for bool turns SUM/MAX into
    logical or and PRODUCT/MIN into logical and, as the backends define them.
    """
    dtype = inputs[0].dtype
    if op in _BITWISE:
        return functools.reduce(_BITWISE[op], inputs)
    stacked = torch.stack([tensor.to(_wide(dtype)) for tensor in inputs])
    if op == "SUM":
        result = stacked.sum(0)
    elif op == "AVG":
        result = stacked.sum(0) / len(inputs)
    elif op == "PRODUCT":
        result = stacked.prod(0)
    elif op == "MIN":
        result = stacked.amin(0)
    elif op == "MAX":
        result = stacked.amax(0)
    elif op == "PREMUL_SUM":
        result = stacked.sum(0) * (factor.double() if isinstance(factor, torch.Tensor) else factor)
    else:
        raise ValueError(f"unknown reduce op {op}")
    if dtype == torch.bool:
        return result != 0
    return result.to(dtype)


def _tolerance(dtype: torch.dtype, op: str) -> tuple[float, float]:
    """(rtol, atol): exact unless the op divides or scales."""
    if op not in ("AVG", "PREMUL_SUM"):
        return 0.0, 0.0
    if dtype in (torch.float16, torch.bfloat16):
        return 1.6e-2, 1e-2
    return 1e-5, 1e-6


@dataclass
class Checker:
    """Collects failures as strings; a worker returns `failures` to the parent."""

    rank: int
    failures: list[str] = field(default_factory=list)
    checks: int = 0

    def close(
        self,
        label: str,
        got: torch.Tensor,
        expected: torch.Tensor,
        op: str = "",
        tolerance: Optional[tuple[float, float]] = None,
    ) -> None:
        """`got` equals `expected`: exactly, within the op's tolerance, or
        within an explicit (rtol, atol)."""
        self.checks += 1
        rtol, atol = tolerance if tolerance is not None else _tolerance(expected.dtype, op)
        exact = rtol == 0.0 and atol == 0.0
        if exact and got.dtype == expected.dtype and got.shape == expected.shape and torch.equal(got, expected):
            return  # the common case, without assert_close's cost on large tensors
        try:
            torch.testing.assert_close(got, expected, rtol=rtol, atol=atol, equal_nan=True)
        except AssertionError as error:
            self.fail(label, str(error).strip().replace("\n", " | ")[:600])

    def true(self, label: str, condition: bool, detail: str = "") -> None:
        self.checks += 1
        if not condition:
            self.fail(label, detail or "condition is false")

    def fail(self, label: str, detail: str) -> None:
        self.failures.append(f"rank {self.rank}: {label}: {detail}")

    def report(self) -> tuple[int, list[str]]:
        """What a worker returns: (number of checks run, failures)."""
        return self.checks, self.failures


def assert_all_passed(reports: Sequence[tuple[int, list[str]]], min_checks: int = 1) -> None:
    """Parent side: every rank ran checks and none failed."""
    failures = [failure for _, rank_failures in reports for failure in rank_failures]
    assert not failures, f"{len(failures)} failed checks:\n" + "\n".join(failures[:50])
    for rank, (checks, _) in enumerate(reports):
        assert checks >= min_checks, f"rank {rank} ran only {checks} checks, expected at least {min_checks}"
