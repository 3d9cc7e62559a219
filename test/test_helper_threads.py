"""Helper threads for large reductions: a group reduces on Options.threads
threads (the worker plus threads - 1 helpers), by default torch's own thread
count, and the result is bit-identical to a single-threaded reduction.
"""

from __future__ import annotations

import os

import torch
import torch.distributed as dist

import torch_monarch
from multiproc import WorkerContext, run_workers_ok
from reference import Checker, assert_all_passed, rank_input, reference_reduce


def _thread_count() -> int:
    return len(os.listdir("/proc/self/task"))


def _new_group_threads(**options: object) -> tuple[dist.ProcessGroup, int]:
    """A new monarch group and how many threads creating it started."""
    before = _thread_count()
    group = dist.new_group(backend="monarch", pg_options=torch_monarch.Options(**options))
    return group, _thread_count() - before


def helper_threads_worker(ctx: WorkerContext) -> tuple[int, list[str]]:
    check = Checker(ctx.rank)
    ctx.init("monarch")
    torch.set_num_threads(1)
    single, base = _new_group_threads(threads=1)
    triple, with_three = _new_group_threads(threads=3)
    check.true("threads=3 starts 2 helpers", with_three - base == 2, f"{with_three} threads vs {base} for threads=1")
    torch.set_num_threads(2)
    default, with_default = _new_group_threads()
    check.true("default follows torch.get_num_threads()", with_default - base == 1, f"{with_default} threads vs {base}")
    torch.set_num_threads(1)

    world = ctx.world_size
    for dtype in (torch.float32, torch.bfloat16, torch.int64):
        numel = (6 << 20) // dtype.itemsize + 3  # several helper slices per chunk, odd length
        inputs = [rank_input(rank, numel, dtype, 5) for rank in range(world)]
        results = {}
        for name, group in (("single", single), ("triple", triple), ("default", default)):
            tensor = inputs[ctx.rank].clone()
            dist.all_reduce(tensor, group=group)
            results[name] = tensor
            out = torch.empty(numel // world, dtype=dtype)
            dist.reduce_scatter_tensor(out, inputs[ctx.rank][: out.numel() * world].clone(), group=group)
            results[name + " reduce_scatter"] = out
        for name in ("triple", "default"):
            check.true(f"{dtype} allreduce {name} == single thread", torch.equal(results[name], results["single"]))
            check.true(
                f"{dtype} reduce_scatter {name} == single thread",
                torch.equal(results[name + " reduce_scatter"], results["single reduce_scatter"]),
            )
        check.close(f"{dtype} allreduce value", results["single"], reference_reduce(inputs, "SUM"), "SUM")
    return check.report()


def test_helper_threads_follow_options_and_match_single_thread() -> None:
    assert_all_passed(run_workers_ok(helper_threads_worker, 2), min_checks=16)
