"""Worker-side helpers for the shared-memory tests (test_shared_memory.py,
test_hierarchical.py): which monarch segments a process maps or left in
/dev/shm, and a SIGKILL while the ranks loop allreduces that go through them.

Segment names are ``monarch-<pid>-<endpoint>-<channel>``: one per process
endpoint and group; the blocks of a process's pooled tensors
(allocate_tensor) are ``monarch-<pid>-pool-<block>``, named while it runs.
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

import torch_monarch
from faults import attempt, backend_of, read_stamp, settled_baseline, signal_self, teardown_leaks
from multiproc import RankResult, WorkerContext
from reference import rank_input, reference_reduce

__all__ = [
    "NUMEL",
    "SHM_DIR",
    "assert_killed_and_named",
    "kill_worker",
    "mapped_segments",
    "names_of",
    "pid_of",
    "pool_names_of",
]

SHM_DIR = "/dev/shm"
# 4 MB of float32: a bandwidth-bound size.
NUMEL = 1 << 20
KILL_DETECT_BOUND_S = 0.5


def names_of(pid: int) -> list[str]:
    """Names of the group segments in /dev/shm created by process ``pid``."""
    prefix = f"monarch-{pid}-"
    return [name for name in os.listdir(SHM_DIR) if name.startswith(prefix) and not name.startswith(prefix + "pool-")]


def pool_names_of(pid: int) -> list[str]:
    """Names in /dev/shm of process ``pid``'s pooled tensors' blocks."""
    return [name for name in os.listdir(SHM_DIR) if name.startswith(f"monarch-{pid}-pool-")]


def mapped_segments() -> set[str]:
    """Paths of the monarch segments this process maps, its own pooled
    tensors' blocks (which live as long as the process) left out."""
    own_pool = f"/dev/shm/monarch-{os.getpid()}-pool-"
    with open("/proc/self/maps") as maps:
        paths = {line.split(maxsplit=5)[5].strip() for line in maps if "/dev/shm/monarch-" in line}
    return {path for path in paths if not path.startswith(own_pool)}


def pid_of(segment: str) -> int:
    """The creator's pid from a segment's name or path."""
    return int(os.path.basename(segment).split("-")[1])


def kill_worker(
    ctx: WorkerContext, layout: str = "", op: str = "all_reduce", cross_memory: str = "off"
) -> dict[str, Any]:
    """The last rank SIGKILLs itself while every rank loops large allreduces
    (``op`` "reduce_scatter": reduce-scatters; "pooled_all_reduce":
    allreduces of tensors from allocate_tensor) on the default group, each
    rank posing as host ``layout[rank]`` (empty: all on this one), through the
    slots of the segments or, as ``cross_memory`` (Options.cross_memory)
    says, reading and writing the peers' tensors with cross-memory copies.
    Returns the survivor's problems and detection time."""
    baseline = settled_baseline()
    victim = ctx.world_size - 1
    stamp = os.path.join(ctx.tmp_dir, "killed")
    # Small segments: a 4 MB allreduce takes over a hundred rounds, so the kill lands mid-op.
    options = torch_monarch.Options(
        shm_segment_bytes=64 << 10, host_name=layout[ctx.rank] if layout else "", cross_memory=cross_memory
    )
    ctx.init("monarch", timeout=timedelta(seconds=10), pg_options=options)
    ctx.store().set(f"pid{ctx.rank}", str(os.getpid()))
    n = ctx.world_size
    block = NUMEL // n
    numel = block * n if op == "reduce_scatter" else NUMEL
    inputs = [rank_input(rank, numel, torch.float32, 11) for rank in range(n)]
    expected = reference_reduce(inputs, "SUM")
    if op == "reduce_scatter":
        expected = expected.view(n, block)[ctx.rank]
    if op == "pooled_all_reduce":
        # Read and written in place by every rank (shared_direct.h), no slot in between.
        output = backend_of(dist.group.WORLD).allocate_tensor(numel, dtype=torch.float32, device=torch.device("cpu"))
    else:
        output = torch.empty_like(expected)

    def run_op() -> None:
        if op == "reduce_scatter":
            dist.reduce_scatter_tensor(output, inputs[ctx.rank])
        else:
            output.copy_(inputs[ctx.rank])
            dist.all_reduce(output)

    dist.barrier()
    if ctx.rank == victim:
        delay_s = random.uniform(0.05, 0.3)  # picks the injection point; synchronises nothing
        threading.Timer(delay_s, signal_self, args=(signal.SIGKILL, stamp)).start()
    problems: list[str] = []
    deadline = time.monotonic() + 8.0
    while True:
        outcome = attempt(run_op)
        if not outcome.ok:
            break
        if not torch.allclose(output, expected, rtol=1e-5, atol=1e-5):
            problems.append(f"an {op} that returned is wrong")
        if time.monotonic() > deadline:
            raise AssertionError("no op failed within 8 s of the kill timer")
    detect_s = outcome.ended - read_stamp(stamp)
    if not outcome.is_a("PeerFailureError") or outcome.failed_ranks != (victim,):
        problems.append(f"expected PeerFailureError naming [{victim}], {outcome.describe()}")
    if detect_s > KILL_DETECT_BOUND_S:
        problems.append(f"raised {detect_s:.3f} s after the kill (bound {KILL_DETECT_BOUND_S} s)")
    for rank in range(ctx.world_size):
        names = names_of(int(ctx.store().get(f"pid{rank}")))
        if names:
            problems.append(f"rank {rank}'s segment name is in /dev/shm after the kill: {names}")
    # abort() gives the mappings back at once, not when the group object goes.
    backend_of(dist.group.WORLD).abort()
    if mapped_segments():
        problems.append(f"segments still mapped after abort(): {sorted(mapped_segments())}")
    problems += teardown_leaks(baseline)
    return {"problems": problems, "detect_s": detect_s}


def assert_killed_and_named(results: list[RankResult]) -> None:
    """The last rank died by SIGKILL; every other ran kill_worker without a problem."""
    victim = results[-1]
    assert victim.exit_code == -signal.SIGKILL, f"the victim did not die by SIGKILL: {victim}"
    for result in results[:-1]:
        assert result.ok, f"rank {result.rank}: {result}"
        assert not result.value["problems"], f"rank {result.rank}: {result.value['problems']}"
