"""A deterministic mix of collectives whose every result is checked.

``run_op(name, step, group)`` builds its inputs from the caller's group rank
and ``step``, runs the op and raises ``WrongResultError`` if an op that
reported success produced a wrong value: a fault may make an op fail, never
make it lie. Every rank of a group must call the same ``(name, step)``
sequence; ``op_sequence(seed)`` gives one from a seed, and ``run_mix`` runs
the first ops of one, noting the first that fails.
"""

from __future__ import annotations

import random
from typing import Any, Callable, Iterator

import torch
import torch.distributed as dist
from faults import attempt

__all__ = ["OP_NAMES", "WrongResultError", "op_sequence", "run_mix", "run_op", "start_all_reduce_large"]

SMALL = 37
# Over the small-message threshold, and with blocks over the remote-read
# threshold (256 KiB) up to world 8: the bandwidth algorithms, by same-host
# remote read.
LARGE = 600_000


class WrongResultError(AssertionError):
    """An op reported success with a wrong result."""


def _check(name: str, step: int, got: torch.Tensor, expected: torch.Tensor) -> None:
    if not torch.equal(got, expected):
        bad = (got != expected).nonzero()
        first = int(bad[0, 0]) if bad.numel() else -1
        raise WrongResultError(
            f"{name} at step {step} succeeded with a wrong result: {bad.shape[0]} elements differ, first at "
            f"{first}: got {got.flatten()[first].item() if first >= 0 else None}, "
            f"expected {expected.flatten()[first].item() if first >= 0 else None}"
        )


def _allreduce_input(n: int, rank: int, step: int) -> torch.Tensor:
    return torch.full((n,), float(rank + 1 + step))


def _allreduce(n: int) -> Callable[[int, int, int, Any], None]:
    def run(rank: int, size: int, step: int, group: Any) -> None:
        t = _allreduce_input(n, rank, step)
        dist.all_reduce(t, group=group)
        _check(f"all_reduce[{n}]", step, t, torch.full((n,), float(size * (size + 1) // 2 + size * step)))

    return run


def _allreduce_async(rank: int, size: int, step: int, group: Any) -> None:
    t = torch.full((SMALL,), float(rank * 3 + step))
    work = dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group, async_op=True)
    assert work is not None
    work.wait()
    _check("all_reduce(MAX, async)", step, t, torch.full((SMALL,), float((size - 1) * 3 + step)))


def _broadcast(rank: int, size: int, step: int, group: Any) -> None:
    root = step % size
    value = float(root * 10 + step + 1)
    t = torch.full((SMALL,), value) if rank == root else torch.zeros(SMALL)
    dist.broadcast(t, group_src=root, group=group)
    _check(f"broadcast(root={root})", step, t, torch.full((SMALL,), value))


def _all_gather(rank: int, size: int, step: int, group: Any) -> None:
    out = torch.empty(size * SMALL)
    dist.all_gather_single(out, torch.full((SMALL,), float(rank + step)), group=group)
    expected = torch.arange(size, dtype=torch.float32).repeat_interleave(SMALL) + step
    _check("all_gather_single", step, out, expected)


def _reduce_scatter(rank: int, size: int, step: int, group: Any) -> None:
    base = torch.arange(size * SMALL, dtype=torch.float32)
    out = torch.empty(SMALL)
    dist.reduce_scatter_single(out, base + rank + step, group=group)
    expected = base[rank * SMALL : (rank + 1) * SMALL] * size + size * (size - 1) // 2 + size * step
    _check("reduce_scatter_single", step, out, expected)


def _all_to_all(rank: int, size: int, step: int, group: Any) -> None:
    inp = (torch.arange(size, dtype=torch.float32) + 100 * rank + step).repeat_interleave(SMALL)
    out = torch.empty(size * SMALL)
    dist.all_to_all_single(out, inp, group=group)
    expected = (torch.arange(size, dtype=torch.float32) * 100 + rank + step).repeat_interleave(SMALL)
    _check("all_to_all_single", step, out, expected)


def _barrier(rank: int, size: int, step: int, group: Any) -> None:
    dist.barrier(group=group)


_OPS: dict[str, Callable[[int, int, int, Any], None]] = {
    "all_reduce": _allreduce(SMALL),
    "all_reduce_large": _allreduce(LARGE),
    "all_reduce_async": _allreduce_async,
    "broadcast": _broadcast,
    "all_gather": _all_gather,
    "reduce_scatter": _reduce_scatter,
    "all_to_all": _all_to_all,
    "barrier": _barrier,
}
OP_NAMES: tuple[str, ...] = tuple(_OPS)


def run_op(name: str, step: int, group: Any = None) -> None:
    """Runs op ``name`` at ``step`` on ``group`` (default: WORLD) and checks it."""
    rank = dist.get_rank(group)
    size = dist.get_world_size(group)
    _OPS[name](rank, size, step, group)


def start_all_reduce_large(step: int, group: Any = None) -> Any:
    """Issues this rank's part of ``run_op("all_reduce_large", step)`` without
    waiting for it; returns the Work."""
    return dist.all_reduce(_allreduce_input(LARGE, dist.get_rank(group), step), group=group, async_op=True)


def op_sequence(seed: int) -> Iterator[tuple[int, str]]:
    """An endless (step, op name) sequence, the same on every rank for a seed."""
    rng = random.Random(seed)
    step = 0
    while True:
        yield step, rng.choice(OP_NAMES)
        step += 1


def run_mix(seed: int, count: int, problems: list[str], where: str, group: Any = None) -> None:
    """Runs the first ``count`` ops of ``op_sequence(seed)`` on ``group``; the
    first that fails (or lies) is added to ``problems`` and ends the mix."""
    for step, name in op_sequence(seed):
        if step >= count:
            return
        outcome = attempt(lambda: run_op(name, step, group))
        if not outcome.ok:
            problems.append(f"{where}: {name} {outcome.describe()}")
            return
