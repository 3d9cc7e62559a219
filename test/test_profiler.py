"""torch.profiler shows a "monarch:<op>" span for every collective and
point-to-point op, as it shows "gloo:<op>" for Gloo's."""

from __future__ import annotations

from datetime import timedelta
from typing import Callable

import torch
import torch.distributed as dist
from torch.profiler import ProfilerActivity, profile

from multiproc import WorkerContext, run_workers_ok

TIMEOUT = timedelta(seconds=60)


def _ops(rank: int, n: int) -> dict[str, Callable[[], None]]:
    """Each collective of the c10d API, keyed by the span it must produce."""
    peer = 1 - rank if rank < 2 else None
    ops: dict[str, Callable[[], None]] = {
        "monarch:all_reduce": lambda: dist.all_reduce(torch.ones(8)),
        "monarch:all_reduce_coalesced": lambda: dist.all_reduce_coalesced([torch.ones(2), torch.ones(3)]),
        "monarch:broadcast": lambda: dist.broadcast(torch.ones(8), src=0),
        "monarch:reduce": lambda: dist.reduce(torch.ones(8), dst=0),
        "monarch:all_gather": lambda: dist.all_gather([torch.empty(4) for _ in range(n)], torch.ones(4)),
        "monarch:_allgather_base": lambda: dist.all_gather_into_tensor(torch.empty(4 * n), torch.ones(4)),
        "monarch:gather": lambda: dist.gather(
            torch.ones(4), [torch.empty(4) for _ in range(n)] if rank == 0 else None, dst=0
        ),
        "monarch:scatter": lambda: dist.scatter(
            torch.empty(4), [torch.ones(4) for _ in range(n)] if rank == 0 else None, src=0
        ),
        "monarch:reduce_scatter": lambda: dist.reduce_scatter(torch.empty(4), [torch.ones(4) for _ in range(n)]),
        "monarch:_reduce_scatter_base": lambda: dist.reduce_scatter_tensor(torch.empty(4), torch.ones(4 * n)),
        "monarch:all_to_all": lambda: dist.all_to_all(
            [torch.empty(2) for _ in range(n)], [torch.ones(2) for _ in range(n)]
        ),
        "monarch:all_to_all_base": lambda: dist.all_to_all_single(torch.empty(2 * n), torch.ones(2 * n)),
        "monarch:barrier": lambda: dist.barrier(),
    }
    if peer is not None:
        send, recv = (dist.send, dist.recv) if rank == 0 else (dist.recv, dist.send)
        ops["monarch:send"] = lambda: (send(torch.ones(4), peer), recv(torch.empty(4), peer))
        ops["monarch:recv"] = lambda: None  # recorded by the line above
    return ops


def profiler_worker(ctx: WorkerContext) -> dict[str, list[str]]:
    ctx.init("monarch", timeout=TIMEOUT)
    ops = _ops(ctx.rank, ctx.world_size)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for run in ops.values():
            run()
    names = {event.name for event in prof.events()}
    missing = sorted(name for name in ops if name not in names)
    # Outside the profiler nothing is recorded, and ops still work.
    tensor = torch.ones(2)
    dist.all_reduce(tensor)
    return {"missing": missing, "monarch_spans": sorted(n for n in names if n.startswith("monarch:"))}


def test_profiler_shows_a_monarch_span_for_each_op() -> None:
    for rank, result in enumerate(run_workers_ok(profiler_worker, 3, timeout=120)):
        assert not result["missing"], f"rank {rank}: no span for {result['missing']}; saw {result['monarch_spans']}"
