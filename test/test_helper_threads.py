"""Helper threads for large reductions: a group reduces on Options.threads
threads (the worker plus threads - 1 helpers), by default torch's own thread
count and at least two where the host has two CPUs per rank of the group on
it, started at the first large reduction, and the result is bit-identical
to a single-threaded reduction.
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


def _new_group(options: torch_monarch.Options) -> tuple[dist.ProcessGroup, int]:
    """A new monarch group and how many threads creating it started."""
    before = _thread_count()
    group = dist.new_group(backend="monarch", pg_options=options)
    return group, _thread_count() - before


def _helpers_started(group: dist.ProcessGroup, numel: int) -> int:
    """Threads the group's first large allreduce started (its helpers)."""
    before = _thread_count()
    dist.all_reduce(torch.ones(numel), group=group)
    return _thread_count() - before


def helper_threads_worker(ctx: WorkerContext) -> tuple[int, list[str]]:
    check = Checker(ctx.rank)
    ctx.init("monarch")
    large = 4 << 20  # 16 MB of float32: slices for every helper
    torch.set_num_threads(1)
    single, single_cost = _new_group(torch_monarch.Options(threads=1))
    triple, triple_cost = _new_group(torch_monarch.Options(threads=3))
    check.true("no helper starts with the group", triple_cost == single_cost, f"{triple_cost} vs {single_cost} threads")
    check.true("a small op starts no helper", _helpers_started(triple, 16) == 0)
    started = _helpers_started(single, large)
    check.true("threads=1 starts no helper", started == 0, f"{started} threads")
    started = _helpers_started(triple, large)
    check.true("threads=3 starts 2 helpers at the first large reduction", started == 2, f"{started} threads")
    check.true("threads=3 is what the group reports", torch_monarch.backend_of(triple).threads == 3)
    torch.set_num_threads(2)
    default, _ = _new_group(torch_monarch.Options())
    torch.set_num_threads(1)
    started = _helpers_started(default, large)
    check.true("the default follows torch.get_num_threads()", started == 1, f"{started} threads")

    # At one torch thread: a second thread where this process's CPUs number
    # two per rank of the group on its host (its affinity, capped by its
    # cgroup's quota: test_usable_cpus.py). Every rank here shares one
    # machine; posing each as a host of its own leaves one rank per host.
    cpus = torch_monarch._C.usable_cpus()
    for name, options, ranks_on_host in (
        ("one host", torch_monarch.Options(), ctx.world_size),
        ("a host per rank", torch_monarch.Options(host_name=f"host{ctx.rank}"), 1),
    ):
        group, _ = _new_group(options)
        expected = 2 if cpus >= 2 * ranks_on_host else 1
        took = torch_monarch.backend_of(group).threads
        check.true(f"one torch thread, {name}: {expected} threads on {cpus} CPUs", took == expected, f"took {took}")
        started = _helpers_started(group, large)
        check.true(f"one torch thread, {name}: {expected - 1} helpers start", started == expected - 1, f"{started}")

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
    assert_all_passed(run_workers_ok(helper_threads_worker, 2), min_checks=20)
