"""A tour of the monarch backend: every collective once, on real processes.

Spawns ``--world-size`` processes on this host that join one monarch group
and run each collective; rank 0 prints what every rank ended up with.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from datetime import timedelta
from typing import Callable

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import torch_monarch  # noqa: F401  (registers the backend)


def _show(name: str, value: object) -> None:
    """Gathers every rank's result to rank 0, which prints them."""
    results: list[object] = [None] * dist.get_world_size()
    dist.all_gather_object(results, value)
    if dist.get_rank() == 0:
        print(f"{name:<24} " + "  ".join(f"r{r}={v}" for r, v in enumerate(results)), flush=True)


def _tour() -> None:
    rank, world = dist.get_rank(), dist.get_world_size()
    steps: list[tuple[str, Callable[[], object]]] = []

    def all_reduce() -> object:
        t = torch.tensor([rank + 1.0, 10.0 * rank])
        dist.all_reduce(t)
        return t.tolist()

    def broadcast() -> object:
        t = torch.tensor([rank * 100])
        dist.broadcast(t, src=world - 1)
        return t.item()

    def reduce() -> object:
        t = torch.tensor([rank + 1])
        dist.reduce(t, dst=0, op=dist.ReduceOp.PRODUCT)
        return t.item() if rank == 0 else "-"

    def all_gather() -> object:
        out = [torch.zeros(1, dtype=torch.int64) for _ in range(world)]
        dist.all_gather(out, torch.tensor([rank * rank]))
        return [t.item() for t in out]

    def reduce_scatter() -> object:
        out = torch.zeros(1)
        # torch 2.13 renamed reduce_scatter_tensor; older releases lack the new name.
        reduce_scatter_single = getattr(dist, "reduce_scatter_single", dist.reduce_scatter_tensor)
        reduce_scatter_single(out, torch.arange(world, dtype=torch.float32), op=dist.ReduceOp.MAX)
        return out.item()

    def all_to_all() -> object:
        out = torch.zeros(world, dtype=torch.int64)
        dist.all_to_all_single(out, torch.arange(world) + 10 * rank)
        return out.tolist()

    def gather() -> object:
        out = [torch.zeros(1, dtype=torch.int64) for _ in range(world)] if rank == 0 else None
        dist.gather(torch.tensor([rank]), out, dst=0)
        return [t.item() for t in out] if out is not None else "-"

    def scatter() -> object:
        out = torch.zeros(1, dtype=torch.int64)
        chunks = [torch.tensor([100 + r]) for r in range(world)] if rank == 0 else None
        dist.scatter(out, chunks, src=0)
        return out.item()

    def send_recv() -> object:
        t = torch.tensor([float(rank)])
        right, left = (rank + 1) % world, (rank - 1) % world
        request = dist.isend(t, right)
        assert request is not None  # None only for a rank outside the group
        got = torch.zeros(1)
        dist.recv(got, left)
        request.wait()
        return got.item()

    def barrier() -> object:
        dist.barrier()
        return "ok"

    steps = [
        ("all_reduce (SUM)", all_reduce),
        ("broadcast (src=last)", broadcast),
        ("reduce (PRODUCT -> 0)", reduce),
        ("all_gather", all_gather),
        ("reduce_scatter (MAX)", reduce_scatter),
        ("all_to_all_single", all_to_all),
        ("gather (-> 0)", gather),
        ("scatter (0 ->)", scatter),
        ("send/recv ring", send_recv),
        ("barrier", barrier),
    ]
    for name, step in steps:
        _show(name, step())


def _worker(rank: int, world: int, store_path: str) -> None:
    dist.init_process_group(
        "monarch",
        init_method=f"file://{store_path}",
        rank=rank,
        world_size=world,
        timeout=timedelta(seconds=60),
    )
    try:
        _tour()
    finally:
        dist.destroy_process_group()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--world-size", type=int, default=4)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        store_path = os.path.join(tmp, "store")
        print(f"monarch collectives on {args.world_size} processes", flush=True)
        mp.spawn(_worker, args=(args.world_size, store_path), nprocs=args.world_size, join=True)


if __name__ == "__main__":
    main()
