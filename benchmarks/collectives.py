"""Collective latency and bandwidth of monarch against its peer backend, in one run.

Usage:

    PYTHONPATH=. python benchmarks/collectives.py --quick --world-size 2
    PYTHONPATH=. python benchmarks/collectives.py --ops allreduce,all_gather --sizes 64K,16M
    PYTHONPATH=. python benchmarks/collectives.py --monarch-env MONARCH_CHUNK_BYTES=1048576
    PYTHONPATH=. python benchmarks/collectives.py --quick --transport rdma

``--transport rdma`` makes every rank pose as a host of its own, so that every
payload of ``rdma_min_bytes`` or more goes by RDMA read, through
``--rdma-provider`` (libfabric's tcp provider on loopback by default: the RDMA
data path without RDMA hardware; "verbs;ofi_rxm" or "efa" on such hardware).

``--world-size`` processes are spawned on loopback (rendezvous through a
FileStore in a temporary directory). Each builds a gloo default group for
control (barriers, timing) and two groups for measuring: one "monarch" and one
of the peer backend of the device (gloo for ``--device cpu``, nccl for
``--device cuda``, where rank r uses GPU r mod the GPU count; ``--world-size 1``
is allowed there and measures per-op overhead against ProcessGroupNCCL, summed
up under the table). Before timing, every selected op is
run once on both groups with the same random integer data and the outputs must
be identical (``--check-size 0`` skips this).

For every (op, size): warm up both groups, pick an iteration count so that a
measurement lasts about ``--target-ms`` (the same count for both), then run
``--rounds`` rounds, each timing monarch and the peer back to back (the order
alternates between rounds). A measurement is ``time.perf_counter`` around N
back-to-back async ops and their waits, maximised over the ranks; the table
reports the median over rounds. Up to ``LATENCY_MAX_BYTES`` each round also
times the same N ops waited on one at a time ("latency"): back to back, the
issuing of the next ops hides an op's latency, and the time per op is the
larger of the two (for a 4 KB op mostly torch's Python and dispatcher). Of
those, the slowest single op ("slowest op", over every round and rank) shows
whether a slow round is a few stalls or every op slower.

The physical limit is memory bandwidth. Every rank measures its memcpy rate
(the fastest of ``copy_`` with the rank's torch threads and, on the CPU,
glibc's ``memmove``, a copy in 16 KiB cached pieces, the streaming-store
copy and the kernel's
``process_vm_readv``, each on one thread and split among the threads a
rank's collectives copy on: its monarch group's threads (its ``threads``:
``--monarch-env MONARCH_THREADS``, else the backend's default) plus the
transport's; of a
buffer of the largest size, at least 64 MiB so it measures DRAM, median of
several, counting bytes read plus bytes written), first
alone, one rank after the other, then all ranks at once; the machine's
aggregate rate is the sum of the rates measured at once. That is the rate
of memory (DRAM). Every rank then copies a buffer of each
measured size at once, split among the group's threads and again among
those plus the transport's: the ops reuse their buffers from one iteration
to the next, so at a size whose buffers fit in the caches an op is bounded by
the caches' rate, not by memory's, and the bound of an op uses the aggregate
rate at its size and at the threads it copies on. An op copies on the
transport's thread too where it moves payload over the links (remote reads,
TCP, RDMA: counted by ``transport_bytes()`` around its warm-up); an op that
goes through shared memory copies on the group's threads alone. An op that
writes its result over its input (allreduce, broadcast, reduce) may write
lines it has just read, with no read of the destination first as a copy's
cached stores do: where the run has one, every rank also times a pass that
rewrites a buffer of each size where it is, at the same threads, and such an
op's bound uses the faster of the two rates. An op that writes each byte it
reads several times (all_gather n times, broadcast n - 1) may read it once
and write it from the cache: on the CPU every rank also times a pass that
does so (``_fan_out_bandwidth``, on its share of the op's reads), and such
an op's bound uses the faster of it and the copy. Every pass runs in
``--bound-repeats`` sweeps over all of them and all sizes, one after the
other, and each rate is the highest of its sweeps: noise only slows a pass,
and a slowed pass would lower the bound's rate and let an op beat it.
The memory model (``MEMORY_MODEL``; benchmarks/RESULTS.md) gives the bytes
the whole machine must read and write for an op: every rank's input once and
every rank's output once, whichever rank's threads move them (a peer may
read or write a rank's buffer). Model bytes / aggregate rate is a lower
bound on the op's time, and "of bound" is that time over the measured time.
``--torch-threads 1`` runs every rank with one torch thread, as torchrun
does; the default gives each rank its share of the CPUs.

Columns follow nccl-tests: size is the full buffer (the allreduce/broadcast
tensor, the all_gather output, the reduce_scatter input, each rank's
all_to_all buffer); algbw = size / time; busbw = algbw * 2(n-1)/n for
allreduce, * (n-1)/n for all_gather, reduce_scatter and all_to_all, * 1 for
broadcast. "speedup" is peer time / monarch time (> 1: monarch is faster);
"of bound" is the memory model's time over monarch's. The table goes to stdout,
followed by one line ``JSON {...}`` with every row; progress goes to stderr.
"""

from __future__ import annotations

import argparse
import ctypes
import functools
import json
import math
import os
import platform
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any, Callable, Optional, Sequence

from _harness import WorkerContext, run_workers_ok
from _ops import OPS, Buffers, element_count
from _timing import EachOp, time_each_op, time_ops

__all__ = ["BenchConfig", "Row", "format_pair", "format_size", "main"]

KIB = 1024
MIB = 1024 * KIB
GIB = 1024 * MIB

DEFAULT_SIZES = [4 * KIB * 4**i for i in range(9)]  # 4K .. 256M, powers of 4
QUICK_SIZES = [4 * KIB, 64 * KIB, 1 * MIB, 16 * MIB]
MEMCPY_MIN_BYTES = 64 * MIB
# Sizes whose latency (ops waited on one at a time) is also measured; above
# it an op takes as long either way.
LATENCY_MAX_BYTES = 1 * MIB
MONARCH = "monarch"
# The payload bytes of ``transport_bytes()`` (the other counter counts RDMA fallbacks).
LINK_PAYLOAD_COUNTERS = ("tcp_sent", "remote_read", "rdma_read")


# Bytes all ranks together must read plus write for an op on a full buffer
# of ``s`` bytes among ``n`` ranks: every input read once and every output
# written once, by whichever rank's threads. Staging through shared memory is
# not counted: a round's slots are reused and stay in the caches
# (benchmarks/RESULTS.md). Model bytes / the machine's aggregate memcpy rate
# with buffers of the op's size is the fastest an op can be.
MEMORY_MODEL: dict[str, Callable[[float, int], float]] = {
    "allreduce": lambda s, n: n * (s + s),
    "reduce_scatter": lambda s, n: n * s + s,  # n inputs of s, n outputs of s/n
    "all_gather": lambda s, n: s + n * s,  # n inputs of s/n, n outputs of s
    "broadcast": lambda s, n: s + (n - 1) * s,  # the root's input, the others' outputs
    "all_to_all": lambda s, n: n * (s + s),
    "reduce": lambda s, n: n * s + s,  # n inputs, the root's output
    "gather": lambda s, n: s + s,  # n inputs of s/n, the root's n outputs
    "scatter": lambda s, n: s + s,
}
# What a run measures unless --ops says otherwise.
DEFAULT_OPS = ["allreduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all"]


@dataclass(frozen=True)
class DeviceSpec:
    """How a device is benchmarked: the peer backend and device hooks."""

    name: str
    peer_backend: str
    # Called once per rank before any group exists (e.g. pick the GPU).
    setup: Callable[[int], None] = lambda rank: None
    # Waits for queued device work (part of every timed measurement).
    sync: Callable[[], None] = lambda: None


def _cuda_setup(rank: int) -> None:
    import torch

    torch.cuda.set_device(rank % torch.cuda.device_count())


def _cuda_sync() -> None:
    import torch

    torch.cuda.synchronize()


# Control and timing stay on gloo; measured buffers live on the rank's device.
DEVICES: dict[str, DeviceSpec] = {
    "cpu": DeviceSpec(name="cpu", peer_backend="gloo"),
    "cuda": DeviceSpec(name="cuda", peer_backend="nccl", setup=_cuda_setup, sync=_cuda_sync),
}


@dataclass(frozen=True)
class BenchConfig:
    ops: list[str]
    sizes: list[int]
    world_size: int
    device: str
    dtype: str
    rounds: int
    warmup: int
    min_iters: int
    max_iters: int
    target_ms: float
    check_bytes: int
    # Torch threads per rank; 0: the host's CPUs divided among the ranks.
    torch_threads: int = 0
    monarch_env: dict[str, str] = field(default_factory=dict)
    # The backend compared against; empty: the device's (gloo, nccl).
    peer: str = ""
    # Every op's tensors from the monarch group's allocate_tensor (CPU): the
    # buffers FSDP2 allocates with set_allocate_memory_from_process_group_for_comm,
    # which monarch's one-host allreduce, reduce-scatter and allgather read in
    # place. Both backends run on the same tensors.
    pooled: bool = False
    # Sweeps of the bound's rate passes; each rate is the highest of them.
    bound_repeats: int = 3


@dataclass
class Row:
    op: str
    size_bytes: int
    monarch_us: float
    peer_us: float
    iterations: int
    algbw_gbps: float
    busbw_gbps: float
    peer_busbw_gbps: float
    speedup: float
    # The memory model's time for this op over monarch's (1: at the bound).
    of_bound: float
    # Copying threads per rank its bound counts: the group's, plus the transport's
    # where the op moved payload over the links.
    copy_threads: int
    # The most payload bytes one rank moved over its links per op (remote reads, TCP, RDMA).
    link_bytes_per_op: int
    monarch_rounds_us: list[float]
    peer_rounds_us: list[float]
    # Medians of ops waited on one at a time, up to LATENCY_MAX_BYTES; else None.
    monarch_latency_us: Optional[float] = None
    peer_latency_us: Optional[float] = None
    # The slowest single op of those, over every round and rank.
    monarch_slowest_op_us: Optional[float] = None
    peer_slowest_op_us: Optional[float] = None


@dataclass
class Report:
    device: str
    peer: str
    world_size: int
    dtype: str
    memcpy_bytes: int
    # Read plus write GB/s of one rank's copy_, all ranks copying at once
    # (median over ranks), their sum, and one rank's copying alone (median).
    memcpy_gbps: float
    memcpy_aggregate_gbps: float
    memcpy_alone_gbps: float
    torch_threads: int
    # Threads per rank the copies were also split among (the rates are the fastest).
    memcpy_threads: int
    # The aggregate rate by copying threads per rank (the group's, and those plus the
    # transport's), then by size: an op's bound uses the rate at its threads and size.
    memcpy_aggregate_gbps_by_threads: dict[int, dict[int, float]]
    # The same for the in-place pass (``_in_place_bandwidth``), which the bound of
    # an op that writes over its input also counts.
    in_place_aggregate_gbps_by_threads: dict[int, dict[int, float]]
    # The same for the fan-out pass (``_fan_out_bandwidth``) by writes per read,
    # which the bound of an op that writes each byte it reads several times counts.
    fan_out_aggregate_gbps: dict[int, dict[int, dict[int, float]]]
    # Every sweep's aggregate rate by pass ("copy", "in_place", "fan_out_<writes>"),
    # threads and size: each rate above is the highest of its sweeps.
    bound_sweeps_gbps: dict[str, dict[int, dict[int, list[float]]]]
    check: str
    rows: list[Row]
    # The share of the host's CPU time its hypervisor gave to others during the
    # run (/proc/stat's steal); None where unknown.
    host_steal_fraction: Optional[float] = None


# ----------------------------------------------------------------------------- rank side


@dataclass
class _Session:
    """One rank's groups and settings, built once by ``_worker``."""

    rank: int
    config: BenchConfig
    spec: DeviceSpec
    # Barriers and timing reductions; never measured.
    control: Any
    # Measured groups: "monarch" and the peer backend, in timing order.
    groups: dict[str, Any]
    dtype: Any
    device: Any
    # The machine's read plus write GB/s with every rank copying buffers of each size at once,
    # by the copying threads per rank.
    memcpy_aggregate_gbps_by_threads: dict[int, dict[int, float]] = field(default_factory=dict)
    # The same for a pass that rewrites a buffer in place.
    in_place_aggregate_gbps_by_threads: dict[int, dict[int, float]] = field(default_factory=dict)
    # The same for passes that write each byte they read k times, by k.
    fan_out_aggregate_gbps: dict[int, dict[int, dict[int, float]]] = field(default_factory=dict)
    # Every sweep of each pass's rate (Report.bound_sweeps_gbps).
    bound_sweeps_gbps: dict[str, dict[int, dict[int, list[float]]]] = field(default_factory=dict)
    # The monarch group's copying threads per rank (1 on a GPU).
    group_threads: int = 1

    @property
    def peer(self) -> str:
        return self.config.peer or self.spec.peer_backend


def _worker(ctx: WorkerContext, config: BenchConfig) -> Optional[dict[str, Any]]:
    """One rank of the benchmark; rank 0 returns the report as plain data."""
    import torch
    import torch.distributed as dist

    import torch_monarch  # registers "monarch"

    spec = DEVICES[config.device]
    threads = config.torch_threads or max(1, (os.cpu_count() or 1) // config.world_size)
    torch.set_num_threads(threads)
    spec.setup(ctx.rank)
    timeout = timedelta(seconds=300)
    peer = config.peer or spec.peer_backend
    dist.init_process_group(
        backend="gloo", init_method=ctx.init_method, rank=ctx.rank, world_size=ctx.world_size, timeout=timeout
    )
    session = _Session(
        rank=ctx.rank,
        config=config,
        spec=spec,
        control=dist.group.WORLD,
        groups={
            MONARCH: dist.new_group(backend=MONARCH, timeout=timeout),
            peer: dist.new_group(backend=peer, timeout=timeout),
        },
        dtype=getattr(torch, config.dtype),
        device=torch.device(config.device),
    )

    # Each rank alone, one after the other; then every rank at once, as
    # they run the ops. On the CPU a rank's collectives copy on its monarch
    # group's threads (as many as the group took) and, for payloads over the
    # links, on the transport's thread.
    memcpy_bytes = max(max(config.sizes), MEMCPY_MIN_BYTES)
    if session.device.type == "cpu":
        session.group_threads = torch_monarch.backend_of(session.groups[MONARCH]).threads
    thread_counts = [session.group_threads, session.group_threads + 1] if session.device.type == "cpu" else [1]
    copy_threads = thread_counts[-1]
    alone = float("nan")
    for rank in range(ctx.world_size):
        dist.barrier(group=session.control)
        if rank == ctx.rank:
            alone = _memcpy_bandwidth(memcpy_bytes, session.device, spec.sync, copy_threads)
    dist.barrier(group=session.control)
    at_once = _memcpy_bandwidth(memcpy_bytes, session.device, spec.sync, copy_threads)
    local = torch.tensor([alone, at_once], dtype=torch.float64)
    rates = [torch.zeros_like(local) for _ in range(ctx.world_size)]
    dist.all_gather(rates, local, group=session.control)
    alone_rates = [float(rate[0].item()) for rate in rates]
    at_once_rates = [float(rate[1].item()) for rate in rates]
    # The in-place pass bounds only the ops that write over their input: a run
    # of none of them skips it.
    passes: list[tuple[str, dict[int, dict[int, float]], Callable[..., float]]] = [
        ("copy", session.memcpy_aggregate_gbps_by_threads, _memcpy_bandwidth)
    ]
    if any(OPS[name].in_place for name in config.ops):
        passes.append(("in_place", session.in_place_aggregate_gbps_by_threads, _in_place_bandwidth))
    # A fan-out pass for each of the run's ops' writes per read above 1, on each
    # rank's share of the op's reads.
    fan_outs = {OPS[name].writes_per_read(ctx.world_size) for name in config.ops} - {1}
    for writes in sorted(fan_outs) if session.device.type == "cpu" else []:
        fan_out = functools.partial(_fan_out_bandwidth, share=ctx.world_size, writes_per_read=writes)
        passes.append((f"fan_out_{writes}", session.fan_out_aggregate_gbps.setdefault(writes, {}), fan_out))
    # Each rate is the highest of --bound-repeats sweeps over every pass and
    # size, all ranks at once, one sweep after the other: a sweep slowed by
    # noise (a neighbour, a descheduled rank) would lower the rate and so let
    # an op come out above its bound, which the highest of several does not.
    for _ in range(config.bound_repeats):
        for threads_per_rank in thread_counts:
            for size in config.sizes:
                for name, by_threads, bandwidth in passes:
                    dist.barrier(group=session.control)
                    rate = torch.tensor(
                        [bandwidth(size, session.device, spec.sync, threads_per_rank)], dtype=torch.float64
                    )
                    dist.all_reduce(rate, group=session.control)
                    sweeps = session.bound_sweeps_gbps.setdefault(name, {}).setdefault(threads_per_rank, {})
                    sweeps.setdefault(size, []).append(float(rate.item()))
                    by_size = by_threads.setdefault(threads_per_rank, {})
                    by_size[size] = max(sweeps[size])

    check = "skipped"
    if config.check_bytes > 0:
        check = _check_ops(session)
        _progress(ctx.rank, check)

    rows: list[Row] = []
    for op_name in config.ops:
        for size in config.sizes:
            row = _measure(session, op_name, size)
            _progress(ctx.rank, _format_row(row, session.peer))
            rows.append(row)
    dist.barrier(group=session.control)
    if ctx.rank != 0:
        return None
    report = Report(
        device=config.device,
        peer=session.peer,
        world_size=config.world_size,
        dtype=config.dtype,
        memcpy_bytes=memcpy_bytes,
        memcpy_gbps=statistics.median(at_once_rates),
        memcpy_aggregate_gbps=sum(at_once_rates),
        memcpy_alone_gbps=statistics.median(alone_rates),
        torch_threads=threads,
        memcpy_threads=copy_threads,
        memcpy_aggregate_gbps_by_threads={t: dict(rates) for t, rates in session.memcpy_aggregate_gbps_by_threads.items()},
        in_place_aggregate_gbps_by_threads={
            t: dict(rates) for t, rates in session.in_place_aggregate_gbps_by_threads.items()
        },
        fan_out_aggregate_gbps={
            k: {t: dict(rates) for t, rates in by_threads.items()} for k, by_threads in session.fan_out_aggregate_gbps.items()
        },
        bound_sweeps_gbps=session.bound_sweeps_gbps,
        check=check,
        rows=rows,
    )
    return asdict(report)


class _IoVec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("length", ctypes.c_size_t)]


# A copy of ``length`` bytes at ``offset`` of one buffer into the same place of another.
_SliceCopy = Callable[[int, int], object]


def _kernel_copy(dst: int, src: int, nbytes: int) -> Optional[_SliceCopy]:
    """Copies by ``process_vm_readv`` of this process; None where the kernel
    refuses it (the remote reads are off there too)."""
    libc = ctypes.CDLL(None, use_errno=True)
    pid = os.getpid()

    def copy(offset: int, length: int) -> int:
        local, remote = _IoVec(dst + offset, length), _IoVec(src + offset, length)
        return int(libc.process_vm_readv(pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0))

    return copy if copy(0, nbytes) == nbytes else None


def _memcpy_bandwidth(nbytes: int, device: Any, sync: Callable[[], None], threads: int, reps: int = 7) -> float:
    """Read plus write GB/s of the fastest copy of ``nbytes`` buffers, each the median of ``reps``.

    The copies: torch's ``dst.copy_(src)`` with the rank's torch threads and,
    on the CPU, glibc's ``memmove``, the streaming-store copy the collectives
    write large results with (``torch_monarch._C.streaming_copy``) and the
    kernel's copy of a remote read (``process_vm_readv`` of this process's own
    memory), each on one thread and again split among ``threads`` threads
    copying at once.
    Above a size near the caches', glibc writes with non-temporal stores,
    which skip reading the destination; ``copy_``'s cached stores read every
    line before writing it, so at 64 MiB its rate understated memory's and an
    op whose copies were glibc's came out above its bound (an all_to_all at
    127%). The ops too large for shared memory move their bytes with the
    kernel's copy, which beat both on the 16-core host (all_to_all and
    scatter at 112-129% of a bound without it). The streaming copy writes
    no line it has to read first either, and on the 16-core host it beat
    glibc's by 7-28% at 64 MiB (one thread per process, 1 to 8 processes at
    once). The tiled copy stores 16 KiB per memcpy call, with the cached
    stores the reductions write their results with below the streaming
    size: an op whose buffers stay in the L3 can beat a whole-buffer
    memmove, whose non-temporal stores go to memory (a pooled allreduce of
    16 MB at world 2 came out at 101% of a bound without it). Split among
    threads: a rank's collectives copy on its monarch threads and, for the
    messages too large for shared memory, on the transport's thread at the
    same time, and with one thread's copies in the
    bound an all_gather at 16 / world threads came out at 133% of it and an
    all_to_all at one thread at 114%.
    """
    import torch

    src = torch.ones(nbytes, dtype=torch.uint8, device=device)
    dst = torch.zeros_like(src)
    rate = functools.partial(_read_write_rate, nbytes=nbytes, sync=sync, reps=reps)

    copies: list[Callable[[], object]] = [lambda: dst.copy_(src)]
    if src.device.type != "cpu":
        return max(rate(copy) for copy in copies)
    import torch_monarch._C as native

    slice_copies: list[_SliceCopy] = [
        lambda offset, length: ctypes.memmove(dst.data_ptr() + offset, src.data_ptr() + offset, length),
        lambda offset, length: native.streaming_copy(dst[offset : offset + length], src[offset : offset + length]),
        lambda offset, length: native.tiled_copy(dst[offset : offset + length], src[offset : offset + length]),
    ]
    kernel_copy = _kernel_copy(dst.data_ptr(), src.data_ptr(), nbytes)
    if kernel_copy is not None:
        slice_copies.append(kernel_copy)
    with ThreadPoolExecutor(max_workers=threads) as pool:
        for copy in slice_copies:
            copies.append(_whole(copy, nbytes))
            if threads > 1:
                copies.append(_split(copy, nbytes, threads, pool))
        return max(rate(copy) for copy in copies)


def _in_place_bandwidth(nbytes: int, device: Any, sync: Callable[[], None], threads: int, reps: int = 7) -> float:
    """Read plus write GB/s of a pass that rewrites every word of an ``nbytes``
    buffer where it is, on the rank's torch threads and split among ``threads``
    threads, each the median of ``reps``.

    An op that writes its result over its input (allreduce, broadcast,
    reduce) may write lines it has just read, which needs no read for
    ownership, where a copy's cached stores read each destination line
    first. Without this pass a pooled allreduce of 1-16 MB at world 2 came
    out at up to 126% of its bound on the 16-core host, where the pass ran
    at 1.0-1.4x the fastest copy (1-64 MB, all ranks at once).
    """
    import torch

    buffer = torch.zeros(nbytes, dtype=torch.uint8, device=device)
    rate = functools.partial(_read_write_rate, nbytes=nbytes, sync=sync, reps=reps)

    def rewrite(offset: int, length: int) -> object:
        piece = buffer[offset : offset + length]
        words = length - length % 8  # whole words go faster; the tail byte by byte
        piece[:words].view(torch.int64).bitwise_xor_(0)
        return piece[words:].bitwise_xor_(0)

    passes = [_whole(rewrite, nbytes)]
    with ThreadPoolExecutor(max_workers=threads) as pool:
        if threads > 1:
            passes.append(_split(rewrite, nbytes, threads, pool))
        return max(rate(rewrite_all) for rewrite_all in passes)


def _fan_out_bandwidth(
    nbytes: int, device: Any, sync: Callable[[], None], threads: int, share: int, writes_per_read: int, reps: int = 7
) -> float:
    """Read plus write GB/s of a pass that writes every byte it reads into
    ``writes_per_read`` buffers: a source of ``nbytes / share`` bytes (a
    rank's share of an op's reads), 64 KiB of it at a time into all of them
    (``torch_monarch._C.fan_out_copy``), with streaming and with cached
    stores, on one thread and split among ``threads``; each the median of
    ``reps``.

    An all_gather reads each byte once and writes it n times (a broadcast
    n - 1 times), a mix a copy's one write per read does not time: with
    only the copy in its bound the pooled all_gather, which pushes each
    block into every output this way, came out at 110% of the bound at
    world 2 and 64 MB on a 16-core host (why that mix went faster there is
    not measured).
    """
    import torch
    import torch_monarch._C as native

    source_bytes = max(1, nbytes // share)
    src = torch.ones(source_bytes, dtype=torch.uint8)
    outputs = [torch.zeros_like(src) for _ in range(writes_per_read)]
    moved = source_bytes * (1 + writes_per_read)

    def rate(work: Callable[[], object]) -> float:
        # _read_write_rate counts one read and one write of its buffer.
        return _read_write_rate(work, source_bytes, sync, reps) * moved / (2 * source_bytes)

    def fan_out(streaming: bool) -> _SliceCopy:
        return lambda offset, length: native.fan_out_copy(
            [out[offset : offset + length] for out in outputs], src[offset : offset + length], streaming
        )

    passes: list[Callable[[], object]] = []
    with ThreadPoolExecutor(max_workers=threads) as pool:
        for streaming in (True, False):
            passes.append(_whole(fan_out(streaming), source_bytes))
            if threads > 1:
                passes.append(_split(fan_out(streaming), source_bytes, threads, pool))
        return max(rate(work) for work in passes)


def _read_write_rate(work: Callable[[], object], nbytes: int, sync: Callable[[], None], reps: int) -> float:
    """GB/s of ``work`` that reads and writes ``nbytes`` each: the median of
    ``reps`` timings. A small buffer is worked on repeatedly within each
    timing (at least 4 MiB in all), so that the clock's resolution does not
    decide its rate."""
    repeat = max(1, (4 * MIB) // nbytes)
    work()  # fault in the pages, warm the code path
    sync()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        for _ in range(repeat):
            work()
        sync()
        times.append(time.perf_counter() - start)
    return 2 * nbytes * repeat / statistics.median(times) / 1e9


def _whole(copy: _SliceCopy, nbytes: int) -> Callable[[], object]:
    return lambda: copy(0, nbytes)


def _split(copy: _SliceCopy, nbytes: int, threads: int, pool: ThreadPoolExecutor) -> Callable[[], object]:
    """``copy`` of ``nbytes`` as ``threads`` page-aligned slices copied at once
    (the copies release the GIL)."""
    step = -(-nbytes // threads // 4096) * 4096
    slices = [(offset, min(step, nbytes - offset)) for offset in range(0, nbytes, step)]
    return lambda: list(pool.map(lambda piece: copy(*piece), slices))


def _check_ops(session: _Session) -> str:
    """Every op on monarch must give exactly the peer's output (integer-valued data).

    Returns a one-line summary; raises AssertionError on the first difference.
    """
    import torch

    config = session.config
    torch.manual_seed(1234 + session.rank)
    numel = element_count(config.check_bytes, session.dtype, config.world_size)
    for op_name in config.ops:
        op = OPS[op_name]
        reference = op.buffers(numel, config.world_size, session.dtype, session.device, fill="random")
        outputs = {}
        for backend, group in session.groups.items():
            buffers = reference.clone()
            op.start(buffers, group).wait()
            session.spec.sync()
            outputs[backend] = buffers.output
        got, want = outputs[MONARCH], outputs[session.peer]
        if op.output_on_root_only and session.rank != 0:
            continue
        if not torch.equal(got, want):
            wrong = got != want
            raise AssertionError(
                f"rank {session.rank}: {op_name} of {numel} {session.dtype} elements: monarch differs from "
                f"{session.peer} in {int(wrong.sum().item())} elements "
                f"(first: {got[wrong][:4].tolist()} vs {want[wrong][:4].tolist()})"
            )
    nbytes = numel * torch.empty((), dtype=session.dtype).element_size()
    return f"ok: {','.join(config.ops)} on {nbytes} B equal to {session.peer}"


def _measure(session: _Session, op_name: str, size: int) -> Row:
    """Warmup, calibration and interleaved rounds for one (op, size)."""
    config, spec, control = session.config, session.spec, session.control
    op = OPS[op_name]
    numel = element_count(size, session.dtype, config.world_size)
    buffers = op.buffers(numel, config.world_size, session.dtype, session.device, fill="zeros")
    if config.pooled:
        buffers = _pooled(buffers, session.groups[MONARCH])
    nbytes = numel * buffers.input.element_size()
    issuers = {backend: functools.partial(op.start, buffers, group) for backend, group in session.groups.items()}

    for issue in issuers.values():
        for _ in range(config.warmup):
            issue().wait()
        spec.sync()
    # One timed op per backend picks the iteration count, the same for both;
    # monarch's says whether the op moves payload over the links.
    moved_before = _link_bytes(session)
    per_op = [time_ops(issue, 1, control, spec.sync) for issue in issuers.values()]
    link_bytes = _max_over_ranks(_link_bytes(session) - moved_before, control)
    copy_threads = session.group_threads + (1 if link_bytes > 0 else 0)
    iterations = min(config.max_iters, max(config.min_iters, math.ceil(config.target_ms / 1e3 / max(per_op))))

    samples: dict[str, list[float]] = {backend: [] for backend in issuers}
    latencies: dict[str, list[EachOp]] = {backend: [] for backend in issuers}
    order = list(issuers)
    for round_index in range(config.rounds):
        for backend in order if round_index % 2 == 0 else reversed(order):
            samples[backend].append(time_ops(issuers[backend], iterations, control, spec.sync))
            if size <= LATENCY_MAX_BYTES:
                latencies[backend].append(time_each_op(issuers[backend], iterations, control, spec.sync))

    peer = session.peer
    monarch_s = statistics.median(samples[MONARCH])
    peer_s = statistics.median(samples[peer])
    factor = op.bus_factor(config.world_size)
    algbw = nbytes / monarch_s / 1e9
    rate = session.memcpy_aggregate_gbps_by_threads[copy_threads][size]
    if op.in_place:
        rate = max(rate, session.in_place_aggregate_gbps_by_threads[copy_threads][size])
    fan_out = session.fan_out_aggregate_gbps.get(op.writes_per_read(config.world_size))
    if fan_out:
        rate = max(rate, fan_out[copy_threads][size])
    bound_s = MEMORY_MODEL[op_name](nbytes, config.world_size) / (rate * 1e9)
    return Row(
        op=op_name,
        size_bytes=nbytes,
        monarch_us=monarch_s * 1e6,
        peer_us=peer_s * 1e6,
        iterations=iterations,
        algbw_gbps=algbw,
        busbw_gbps=algbw * factor,
        peer_busbw_gbps=nbytes / peer_s / 1e9 * factor,
        speedup=peer_s / monarch_s,
        of_bound=bound_s / monarch_s,
        copy_threads=copy_threads,
        link_bytes_per_op=link_bytes,
        monarch_rounds_us=[round(t * 1e6, 2) for t in samples[MONARCH]],
        peer_rounds_us=[round(t * 1e6, 2) for t in samples[peer]],
        monarch_latency_us=_median_us([each.seconds_per_op for each in latencies[MONARCH]]),
        peer_latency_us=_median_us([each.seconds_per_op for each in latencies[peer]]),
        monarch_slowest_op_us=_max_us([each.slowest_op for each in latencies[MONARCH]]),
        peer_slowest_op_us=_max_us([each.slowest_op for each in latencies[peer]]),
    )


def _pooled(buffers: Buffers, group: Any) -> Buffers:
    """The same buffers in tensors from ``group``'s allocate_tensor."""
    import torch

    import torch_monarch

    backend = torch_monarch.backend_of(group)

    def copy(tensor: torch.Tensor) -> torch.Tensor:
        pooled = backend.allocate_tensor(tensor.numel(), dtype=tensor.dtype, device=tensor.device)
        return pooled.copy_(tensor)

    inp = copy(buffers.input)
    return Buffers(input=inp, output=inp if buffers.output is buffers.input else copy(buffers.output))


def _link_bytes(session: _Session) -> int:
    """Payload bytes this rank's monarch group has moved over its host links so far (0 on a GPU)."""
    import torch_monarch

    if session.device.type != "cpu":
        return 0
    counters = torch_monarch.backend_of(session.groups[MONARCH]).transport_bytes()
    return sum(counters[key] for key in LINK_PAYLOAD_COUNTERS)


def _max_over_ranks(value: int, control: Any) -> int:
    import torch
    import torch.distributed as dist

    t = torch.tensor([value], dtype=torch.int64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=control)
    return int(t.item())


def _median_us(seconds: list[float]) -> Optional[float]:
    return statistics.median(seconds) * 1e6 if seconds else None


def _max_us(seconds: list[float]) -> Optional[float]:
    return max(seconds) * 1e6 if seconds else None


def _progress(rank: int, line: str) -> None:
    if rank == 0:
        print(f"[progress] {line}", file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------- output


def format_size(nbytes: int) -> str:
    """A byte count as the tables print it: 4K, 16M, 1G, or bytes."""
    for unit, scale in (("G", GIB), ("M", MIB), ("K", KIB)):
        if nbytes >= scale and nbytes % scale == 0:
            return f"{nbytes // scale}{unit}"
    return f"{nbytes}B"


_COLUMNS = (
    "op",
    "size",
    "monarch us",
    "{peer} us",
    "algbw GB/s",
    "busbw GB/s",
    "speedup",
    "of bound",
    "latency us monarch/{peer}",
    "slowest op us monarch/{peer}",
)
_WIDTHS = (15, 6, 12, 12, 11, 11, 8, 10, 26, 30)


def _format_header(peer: str) -> str:
    cells = [c.format(peer=peer) for c in _COLUMNS]
    return "  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, _WIDTHS)))


def _format_row(row: Row, peer: str) -> str:
    cells = [
        row.op,
        format_size(row.size_bytes),
        f"{row.monarch_us:.1f}",
        f"{row.peer_us:.1f}",
        f"{row.algbw_gbps:.3f}",
        f"{row.busbw_gbps:.3f}",
        f"{row.speedup:.2f}x",
        f"{row.of_bound * 100:.1f}%",
        format_pair(row.monarch_latency_us, row.peer_latency_us),
        format_pair(row.monarch_slowest_op_us, row.peer_slowest_op_us),
    ]
    return "  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, _WIDTHS)))


def format_pair(monarch_us: Optional[float], peer_us: Optional[float]) -> str:
    """Two times as the tables print them: "monarch / peer", or "-" where either is missing."""
    if monarch_us is None or peer_us is None:
        return "-"
    return f"{monarch_us:.1f} / {peer_us:.1f}"


def format_report(report: Report, config: BenchConfig) -> str:
    env = " ".join(f"{key}={value}" for key, value in config.monarch_env.items()) or "-"
    lines = [
        f"# collectives: device={report.device} world_size={report.world_size} dtype={report.dtype} "
        f"peer={report.peer} torch_threads/rank={report.torch_threads} host_cpus={os.cpu_count()} "
        f"monarch_env={env}" + (" tensors=pooled (allocate_tensor)" if config.pooled else ""),
        f"# memcpy read+write (the fastest of copy_ at {report.torch_threads} torch thread(s), memmove, 16 KiB cached pieces, streaming stores and "
        f"process_vm_readv on 1 or {report.memcpy_threads} thread(s), {format_size(report.memcpy_bytes)} per rank): {report.memcpy_alone_gbps:.2f} GB/s a rank alone, {report.memcpy_gbps:.2f} GB/s per rank "
        f"all at once (medians), {report.memcpy_aggregate_gbps:.2f} GB/s together",
        *_rates_by_size_lines("memcpy", report.memcpy_aggregate_gbps_by_threads),
        *_rates_by_size_lines(
            "in-place pass (the bound of the ops that write over their input)",
            report.in_place_aggregate_gbps_by_threads,
        ),
        *(
            line
            for writes, by_threads in report.fan_out_aggregate_gbps.items()
            for line in _rates_by_size_lines(
                f"fan-out pass writing each byte read {writes} times (the bound of the ops that do)", by_threads
            )
        ),
        f"# each rate is the highest of {config.bound_repeats} sweeps over every pass and size, all ranks at once; "
        f"one rate's sweeps differ by up to {_bound_spread(report) * 100:.0f}%",
        "# of bound counts the monarch group's copying threads, and the transport's too for the ops that moved "
        "payload over the links: " + (", ".join(_link_ops(report)) or "none"),
        f"# correctness check: {report.check}",
        "# host steal (its CPU time the hypervisor gave to others during the run, /proc/stat): "
        + ("unknown" if report.host_steal_fraction is None else f"{report.host_steal_fraction * 100:.1f}%"),
        f"# speedup = {report.peer} time / monarch time (> 1: monarch faster); "
        f"of bound = memory-model bytes / aggregate memcpy rate (or, if faster, the in-place pass's for the ops that "
        f"write over their input and the fan-out pass's for those that write each byte read several times) at the "
        f"op's size / monarch time; "
        f"latency = time per op waited on one at a time (up to {format_size(LATENCY_MAX_BYTES)}), "
        f"slowest op = the longest of those single ops, any round, any rank",
        _format_header(report.peer),
    ]
    lines += [_format_row(row, report.peer) for row in report.rows]
    if report.device == "cuda" and report.rows:
        lines.append(_overhead_line(report))
    return "\n".join(lines)


def _bound_spread(report: Report) -> float:
    """The largest of the bound's rates' relative spreads between sweeps."""
    spreads = [
        max(sweeps) / min(sweeps) - 1
        for by_threads in report.bound_sweeps_gbps.values()
        for by_size in by_threads.values()
        for sweeps in by_size.values()
    ]
    return max(spreads, default=0.0)


def _rates_by_size_lines(what: str, by_threads: dict[int, dict[int, float]]) -> list[str]:
    """One line per copying-thread count: ``what``'s aggregate rate at each size."""
    return [
        f"# {what} together at each size on {threads} thread(s) per rank: "
        + ", ".join(f"{format_size(size)} {rate:.1f} GB/s" for size, rate in by_size.items())
        for threads, by_size in by_threads.items()
    ]


def _link_ops(report: Report) -> list[str]:
    """The (op, size) cells whose bound counted the transport's thread."""
    return [f"{row.op} {format_size(row.size_bytes)}" for row in report.rows if row.link_bytes_per_op > 0]


def _overhead_line(report: Report) -> str:
    """Monarch's extra time per op over the peer at each op's smallest size."""
    smallest: dict[str, Row] = {}
    for row in report.rows:
        if row.op not in smallest or row.size_bytes < smallest[row.op].size_bytes:
            smallest[row.op] = row
    parts = [
        f"{op} {row.monarch_us - row.peer_us:+.1f} us ({format_size(row.size_bytes)})" for op, row in smallest.items()
    ]
    return f"# per-op overhead, monarch - {report.peer} at the smallest size: " + ", ".join(parts)


def report_json(report: Report, config: BenchConfig) -> str:
    payload = {
        "benchmark": "collectives",
        "host": {"cpus": os.cpu_count(), "machine": platform.machine(), "python": platform.python_version()},
        "torch": _torch_version(),
        "config": asdict(config),
        **asdict(report),
    }
    return json.dumps(payload, separators=(",", ":"))


def _torch_version() -> str:
    import torch

    return str(torch.__version__)


# ----------------------------------------------------------------------------- command line


def _parse_size(text: str) -> int:
    value = _parse_byte_count(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"size must be positive: {text!r}")
    return value


def _parse_byte_count(text: str) -> int:
    text = text.strip().upper().removesuffix("B")
    scale = {"K": KIB, "M": MIB, "G": GIB}.get(text[-1:], 1)
    number = text[:-1] if scale != 1 else text
    try:
        value = int(float(number) * scale)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 4096, 64K, 16M)") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"size must not be negative: {text!r}")
    return value


def _parse_sizes(text: str) -> list[int]:
    return [_parse_size(part) for part in text.split(",") if part.strip()]


def _parse_ops(text: str) -> list[str]:
    ops = [part.strip() for part in text.split(",") if part.strip()]
    unknown = [op for op in ops if op not in OPS]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown op(s) {unknown}; choose from {sorted(OPS)}")
    return ops


def _parse_env(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--device", choices=sorted(DEVICES), default="cpu")
    parser.add_argument(
        "--peer",
        choices=["gloo", "nccl"],
        default=None,
        help="backend to compare against (default: gloo on cpu, nccl on cuda; gloo on cuda measures "
        "ProcessGroupGloo's CUDA-tensor path, for ranks sharing a GPU, which NCCL refuses)",
    )
    parser.add_argument(
        "--ops", type=_parse_ops, default=DEFAULT_OPS, help=f"comma list of {','.join(OPS)} (default: {','.join(DEFAULT_OPS)})"
    )
    parser.add_argument("--sizes", type=_parse_sizes, default=None, help="comma list, e.g. 4K,64K,1M (bytes, binary)")
    parser.add_argument("--dtype", choices=["float32", "float64", "bfloat16", "float16", "int32"], default="float32")
    parser.add_argument("--quick", action="store_true", help="about a minute: 4K,64K,1M,16M and fewer rounds")
    parser.add_argument("--rounds", type=int, default=None, help="interleaved rounds per (op, size); median reported")
    parser.add_argument("--warmup", type=int, default=3, help="warmup ops per backend per (op, size)")
    parser.add_argument("--min-iters", type=int, default=2)
    parser.add_argument("--max-iters", type=int, default=200)
    parser.add_argument("--target-ms", type=float, default=None, help="aimed duration of one measurement")
    parser.add_argument(
        "--torch-threads",
        type=int,
        default=0,
        help="torch threads per rank (1: as torchrun starts ranks); default: host CPUs / world size",
    )
    parser.add_argument("--check-size", type=_parse_byte_count, default=4 * MIB, help="correctness check size; 0 skips")
    parser.add_argument(
        "--monarch-env",
        type=_parse_env,
        action="append",
        default=[],
        metavar="KEY=VAL",
        help="environment for the ranks, e.g. MONARCH_CHUNK_BYTES=1048576 (repeatable)",
    )
    parser.add_argument(
        "--transport",
        choices=["auto", "tcp", "rdma"],
        default=None,
        help="MONARCH_TRANSPORT for the monarch group; rdma: every rank a host of its own (default: as set)",
    )
    parser.add_argument(
        "--rdma-provider", default="tcp;ofi_rxm", help="libfabric provider of --transport rdma (default %(default)s)"
    )
    parser.add_argument(
        "--pooled",
        action="store_true",
        help="every op's tensors from the monarch group's allocate_tensor (as FSDP2's "
        "set_allocate_memory_from_process_group_for_comm), for both backends",
    )
    parser.add_argument(
        "--bound-repeats",
        type=int,
        default=3,
        help="sweeps of the bound's rate passes, each rate the highest of them (default %(default)s)",
    )
    parser.add_argument("--timeout", type=float, default=None, help="bound on the whole run, seconds")
    return parser


def _transport_env(transport: Optional[str], provider: str) -> dict[str, str]:
    if transport is None:
        return {}
    if transport != "rdma":
        return {"MONARCH_TRANSPORT": transport}
    env = {"MONARCH_TRANSPORT": "rdma", "MONARCH_RDMA_PROVIDER": provider, "MONARCH_HOST_NAME": "host{rank}"}
    if provider.startswith("tcp"):
        env["FI_TCP_IFACE"] = "lo"  # the ranks run on loopback
    return env


def _config_from_args(args: argparse.Namespace) -> BenchConfig:
    minimum = 1 if args.device == "cuda" else 2
    if args.world_size < minimum:
        raise SystemExit(f"--world-size must be at least {minimum} for --device {args.device}")
    if args.bound_repeats < 1:
        raise SystemExit(f"--bound-repeats must be at least 1, got {args.bound_repeats}")
    sizes = args.sizes or (QUICK_SIZES if args.quick else DEFAULT_SIZES)
    return BenchConfig(
        ops=args.ops,
        sizes=sizes,
        world_size=args.world_size,
        device=args.device,
        dtype=args.dtype,
        rounds=args.rounds or (7 if args.quick else 9),
        warmup=args.warmup,
        min_iters=args.min_iters,
        max_iters=args.max_iters,
        target_ms=args.target_ms or (25.0 if args.quick else 100.0),
        check_bytes=args.check_size,
        torch_threads=args.torch_threads,
        monarch_env={**_transport_env(args.transport, args.rdma_provider), **dict(args.monarch_env)},
        peer=args.peer or "",
        pooled=args.pooled,
        bound_repeats=args.bound_repeats,
    )


def cpu_times(stat: str = "/proc/stat") -> Optional[list[int]]:
    """The host's CPU time by kind (/proc/stat's ``cpu`` line, in ticks); None where unreadable."""
    try:
        with open(stat) as lines:
            fields = lines.readline().split()
    except OSError:
        return None
    if len(fields) < 9 or fields[0] != "cpu":
        return None
    return [int(value) for value in fields[1:9]]  # user nice system idle iowait irq softirq steal


def steal_fraction(before: Optional[list[int]], after: Optional[list[int]]) -> Optional[float]:
    """The share of the CPU time between two ``cpu_times`` that the hypervisor gave to others.

    On a virtual machine whose host is busy, a rank's thread can stop for a
    while at any instruction; collectives, whose ops wait for every rank,
    slow down with it. Runs with steal are not comparable with runs without.
    """
    if before is None or after is None:
        return None
    elapsed = sum(after) - sum(before)
    return (after[7] - before[7]) / elapsed if elapsed > 0 else None


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = _build_parser().parse_args(argv)
    config = _config_from_args(args)
    timeout = args.timeout or (300.0 if args.quick else 3600.0)
    started = time.monotonic()
    times_before = cpu_times()
    data = run_workers_ok(_worker, config.world_size, config, timeout=timeout, env=config.monarch_env)[0]
    steal = steal_fraction(times_before, cpu_times())
    report = Report(**{**data, "rows": [Row(**row) for row in data["rows"]], "host_steal_fraction": steal})
    print(format_report(report, config))
    print(f"# wall time {time.monotonic() - started:.1f} s; medians over {config.rounds} rounds")
    print("JSON " + report_json(report, config), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
