"""The collectives the benchmarks time, described once for every backend.

A ``CollectiveOp`` knows how to allocate its buffers for a message size, how
to start the op on a group, and how nccl-tests turn algorithm bandwidth into
bus bandwidth. The size of a measurement is the full buffer, as nccl-tests
report it: the allreduce/broadcast tensor, the all_gather output, the
reduce_scatter input, the all_to_all input (each rank's whole buffer), the
root's buffer of a reduce, gather or scatter.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
import torch.distributed as dist

__all__ = ["Buffers", "CollectiveOp", "OPS", "element_count"]

# torch >= 2.12 deprecates the *_tensor names in favour of *_single; they
# still work and are what the other torch versions have.
warnings.filterwarnings("ignore", message=r"`torch\.distributed\.\w+` is deprecated", category=FutureWarning)


@dataclass
class Buffers:
    """The tensors one rank passes to one op."""

    input: torch.Tensor
    output: torch.Tensor
    # The root's list of per-rank views for gather and scatter, made at the
    # first op: a caller that gathers into the same buffers keeps its list,
    # and chunking at every op timed the caller's Python, not the collective.
    blocks: list[torch.Tensor] = field(default_factory=list)

    def clone(self) -> "Buffers":
        """A deep copy that keeps in-place aliasing (output is input)."""
        inp = self.input.clone()
        out = inp if self.output is self.input else self.output.clone()
        return Buffers(input=inp, output=out)


@dataclass(frozen=True)
class CollectiveOp:
    name: str
    # (input numel, output numel) for a full-buffer numel and a world size.
    shapes: Callable[[int, int], tuple[int, int]]
    # Starts the op asynchronously on a group and returns its Work.
    start: Callable[[Buffers, Any], Any]
    # busbw = algbw * bus_factor(world_size), as in nccl-tests.
    bus_factor: Callable[[int], float]
    # Whether the op's output is written in place into ``input``.
    in_place: bool = False
    # Whether only the root (rank 0) has a defined output (reduce).
    output_on_root_only: bool = False
    # The outputs each byte read is written into over the machine (the memory
    # model's written bytes over its read bytes) for a world size; above 1 the
    # op's bound also counts a pass that writes each byte it reads that often.
    writes_per_read: Callable[[int], int] = lambda n: 1

    def buffers(self, numel: int, world_size: int, dtype: torch.dtype, device: torch.device, fill: str) -> Buffers:
        """Buffers for a full-buffer ``numel``; ``fill`` is "zeros" or "random"."""
        in_numel, out_numel = self.shapes(numel, world_size)
        if fill == "zeros":
            # Zeros stay zeros under repeated SUMs: no overflow, no denormals.
            inp = torch.zeros(in_numel, dtype=dtype, device=device)
        else:
            # Small integers: any reduction order gives bit-identical sums.
            inp = torch.randint(-8, 8, (in_numel,), device=device).to(dtype)
        # Zeros, not empty: a rank that is not a gather's root leaves it as it is.
        out = inp if self.in_place else torch.zeros(out_numel, dtype=dtype, device=device)
        return Buffers(input=inp, output=out)


def element_count(size_bytes: int, dtype: torch.dtype, world_size: int) -> int:
    """Elements of a full buffer of about ``size_bytes``, divisible by the world size."""
    itemsize = torch.empty((), dtype=dtype).element_size()
    numel = max(world_size, size_bytes // itemsize)
    return numel - numel % world_size


def _ring_factor(world_size: int) -> float:
    return (world_size - 1) / world_size


def _is_root(group: Any) -> bool:
    return dist.get_rank(group) == 0


def _root_blocks(b: Buffers, whole: torch.Tensor, group: Any) -> list[torch.Tensor] | None:
    if not _is_root(group):
        return None
    if not b.blocks:
        b.blocks = list(whole.chunk(dist.get_world_size(group)))
    return b.blocks


def _gather(b: Buffers, group: Any) -> Any:
    return dist.gather(b.input, gather_list=_root_blocks(b, b.output, group), dst=0, group=group, async_op=True)


def _scatter(b: Buffers, group: Any) -> Any:
    return dist.scatter(b.output, scatter_list=_root_blocks(b, b.input, group), src=0, group=group, async_op=True)


OPS: dict[str, CollectiveOp] = {
    op.name: op
    for op in (
        CollectiveOp(
            name="allreduce",
            shapes=lambda numel, n: (numel, numel),
            start=lambda b, group: dist.all_reduce(b.input, group=group, async_op=True),
            bus_factor=lambda n: 2 * _ring_factor(n),
            in_place=True,
        ),
        CollectiveOp(
            name="all_gather",
            shapes=lambda numel, n: (numel // n, numel),
            start=lambda b, group: dist.all_gather_into_tensor(b.output, b.input, group=group, async_op=True),
            bus_factor=_ring_factor,
            writes_per_read=lambda n: n,
        ),
        CollectiveOp(
            name="reduce_scatter",
            shapes=lambda numel, n: (numel, numel // n),
            start=lambda b, group: dist.reduce_scatter_tensor(b.output, b.input, group=group, async_op=True),
            bus_factor=_ring_factor,
        ),
        CollectiveOp(
            name="broadcast",
            shapes=lambda numel, n: (numel, numel),
            # Global rank 0 is in every group these benchmarks build.
            start=lambda b, group: dist.broadcast(b.input, src=0, group=group, async_op=True),
            bus_factor=lambda n: 1.0,
            in_place=True,
            writes_per_read=lambda n: n - 1,
        ),
        # The rooted ops besides broadcast; the size is the root's whole
        # buffer, busbw as for all_gather (gather, scatter) and broadcast.
        CollectiveOp(
            name="reduce",
            shapes=lambda numel, n: (numel, numel),
            start=lambda b, group: dist.reduce(b.input, dst=0, group=group, async_op=True),
            bus_factor=lambda n: 1.0,
            in_place=True,
            output_on_root_only=True,
        ),
        CollectiveOp(
            name="gather",
            shapes=lambda numel, n: (numel // n, numel),
            start=_gather,
            bus_factor=_ring_factor,
        ),
        CollectiveOp(
            name="scatter",
            shapes=lambda numel, n: (numel, numel // n),
            start=_scatter,
            bus_factor=_ring_factor,
        ),
        CollectiveOp(
            name="all_to_all",
            shapes=lambda numel, n: (numel, numel),
            start=lambda b, group: dist.all_to_all_single(b.output, b.input, group=group, async_op=True),
            bus_factor=_ring_factor,
        ),
    )
}
