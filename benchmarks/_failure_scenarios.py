"""What each rank does in benchmarks/failures.py (the rank side).

``kill`` / ``stop``: every rank runs allreduce in a loop; at iteration
``FAULT_AT`` the victim writes the time (CLOCK_MONOTONIC, one clock for all
processes of the host) to a stamp file and sends itself SIGKILL or SIGSTOP.
Each survivor reports when its allreduce raised, what it raised, and then
tries ``shrink_group`` past the victim (timed, and checked with one
allreduce on the shrunk group).

``abort``: rank 0 starts an allreduce rank 1 never joins; another thread
calls ``ProcessGroup.abort()``; rank 0 reports when (if) ``wait()`` raised.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Optional

from _harness import WorkerContext

__all__ = ["RunConfig", "rank_main"]

FAULT_AT = 20
ELEMENTS = 1024


@dataclass(frozen=True)
class RunConfig:
    scenario: str  # "kill" | "stop" | "abort"
    backend: str  # "monarch" | "gloo"
    world_size: int
    op_timeout_s: float
    abort_bound_s: float

    @property
    def victim(self) -> int:
        return self.world_size - 1


def _error_summary(error: BaseException) -> dict[str, Any]:
    return {
        "type": type(error).__name__,
        "failed_ranks": list(getattr(error, "failed_ranks", []) or []),
        "message": str(error).splitlines()[0][:240] if str(error) else "",
    }


def _stamp_and_signal(path: str, sig: signal.Signals) -> None:
    with open(path + ".tmp", "w") as f:
        f.write(repr(time.monotonic()))
    os.rename(path + ".tmp", path)
    os.kill(os.getpid(), sig)


def _connection_count(group: Any) -> Optional[int]:
    import torch

    backend = group._get_backend(torch.device("cpu"))
    return backend.connection_count() if hasattr(backend, "connection_count") else None


def _try_shrink(cfg: RunConfig) -> dict[str, Any]:
    import torch
    import torch.distributed as dist

    before = _connection_count(dist.group.WORLD)
    start = time.perf_counter()
    try:
        dist.shrink_group([cfg.victim])
    except Exception as error:  # noqa: BLE001 - reported, e.g. gloo cannot shrink
        return {"shrink_error": _error_summary(error)}
    shrink_s = time.perf_counter() - start
    after = _connection_count(dist.group.WORLD)
    t = torch.ones(ELEMENTS)
    dist.all_reduce(t)
    correct = bool((t == cfg.world_size - 1).all())
    return {"shrink_s": shrink_s, "connections": (before, after), "shrunk_allreduce_correct": correct}


def _fault(ctx: WorkerContext, cfg: RunConfig) -> dict[str, Any]:
    import torch
    import torch.distributed as dist

    stamp = os.path.join(ctx.tmp_dir, "fault-stamp")
    sig = signal.SIGKILL if cfg.scenario == "kill" else signal.SIGSTOP
    t = torch.ones(ELEMENTS)
    for i in range(10**9):
        if i == FAULT_AT and ctx.rank == cfg.victim:
            _stamp_and_signal(stamp, sig)
        try:
            dist.all_reduce(t)
        except Exception as error:  # noqa: BLE001 - what each backend raises is the result
            raised_at = time.monotonic()
            with open(stamp) as f:
                fault_at = float(f.read())
            report = {"latency_s": raised_at - fault_at, **_error_summary(error)}
            report.update(_try_shrink(cfg))
            return report
    raise AssertionError("unreachable")


def _abort(ctx: WorkerContext, cfg: RunConfig) -> dict[str, Any]:
    import torch
    import torch.distributed as dist

    store = dist.FileStore(ctx.aux_store_path, ctx.world_size)
    if ctx.rank != 0:
        store.wait(["measured"], timedelta(seconds=cfg.abort_bound_s + 60))
        return {}
    work = dist.all_reduce(torch.ones(ELEMENTS), async_op=True)
    abort_result: dict[str, Any] = {}

    def aborter() -> None:
        abort_result["started"] = time.monotonic()
        try:
            dist.group.WORLD.abort()
        except Exception as error:  # noqa: BLE001 - reported
            abort_result["abort_error"] = _error_summary(error)

    thread = threading.Thread(target=aborter, name="aborter", daemon=True)
    thread.start()
    report: dict[str, Any] = {}
    try:
        work.wait(timeout=timedelta(seconds=cfg.abort_bound_s))
        report["returned"] = True
    except Exception as error:  # noqa: BLE001 - what each backend raises is the result
        report.update(_error_summary(error))
    ended = time.monotonic()
    thread.join(cfg.abort_bound_s)
    report["abort_returned"] = not thread.is_alive()
    report.update(abort_result)
    report["latency_s"] = ended - abort_result["started"] if "started" in abort_result else None
    store.set("measured", "1")
    return report


def rank_main(ctx: WorkerContext, cfg: RunConfig) -> dict[str, Any]:
    import torch
    import torch.distributed as dist

    if cfg.backend == "monarch":
        import torch_monarch  # noqa: F401 - registers the backend
    dist.init_process_group(
        backend=cfg.backend,
        init_method=ctx.init_method,
        rank=ctx.rank,
        world_size=ctx.world_size,
        timeout=timedelta(seconds=cfg.op_timeout_s),
    )
    t = torch.ones(ELEMENTS)
    for _ in range(5):
        dist.all_reduce(t)
    dist.barrier()
    if cfg.scenario == "abort":
        return _abort(ctx, cfg)
    return _fault(ctx, cfg)
