"""Several processes sharing one GPU over NCCL.

NCCL refuses two ranks of a communicator on one GPU ("Duplicate GPU detected")
unless each rank claims a host of its own (NCCL_HOSTID), in which case they
talk over sockets on loopback. By default such a group takes the host-staged
route instead (test_cuda_host_staged.py); these tests ask for NCCL
(MONARCH_GPU_TRANSPORT=nccl) with a host id per rank: every collective runs
over NCCL, and a peer that never joins a collective turns into a timeout
naming it, or an abort that frees the stuck kernel, never a hang.
"""

from __future__ import annotations

import os
import time
from datetime import timedelta
from typing import Any

import pytest
import torch
import torch.distributed as dist

import torch_monarch
from gpu_helpers import monarch_group
from multiproc import WorkerContext, run_workers_ok

pytestmark = pytest.mark.cuda

# NCCL over loopback sockets, every rank claiming its own host.
SOCKET_ENV = {
    "MONARCH_GPU_TRANSPORT": "nccl",
    "NCCL_NET": "Socket",
    "NCCL_SOCKET_IFNAME": "lo",
    "NCCL_P2P_DISABLE": "1",
    "NCCL_SHM_DISABLE": "1",
    "NCCL_IB_DISABLE": "1",
    "NCCL_NVLS_ENABLE": "0",
}
RUN_TIMEOUT = 120.0


def _setup(ctx: WorkerContext, own_host: bool, timeout: timedelta = timedelta(seconds=60)) -> None:
    if own_host:
        os.environ["NCCL_HOSTID"] = f"monarch-test-host-{ctx.rank}"  # read at NCCL's first use
    torch.cuda.set_device(0)
    ctx.init("monarch", timeout=timeout)


def default_nccl_worker(ctx: WorkerContext) -> dict[str, Any]:
    _setup(ctx, own_host=False)
    host = torch.full((4,), float(ctx.rank))
    dist.all_reduce(host)
    gpu = torch.full((4,), float(ctx.rank + 1), device="cuda")
    started = time.monotonic()
    try:
        dist.all_reduce(gpu)
        torch.cuda.synchronize()
        outcome = f"ok {gpu.tolist()}"
    except dist.DistBackendError as e:
        outcome = f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"
    took = time.monotonic() - started
    # Host tensors still work in the same group after the GPU op failed.
    again = torch.ones(2)
    dist.all_reduce(again)
    return {"host": host.tolist(), "gpu": outcome, "seconds": took, "host_after": again.tolist()}


def test_two_ranks_on_one_gpu_by_default() -> None:
    # The default (gpu_transport=auto) sees the shared GPU and stages through the host.
    results = run_workers_ok(default_nccl_worker, 2, timeout=RUN_TIMEOUT)
    for rank, result in enumerate(results):
        print(f"rank {rank}: GPU all_reduce -> {result['gpu']} ({result['seconds']:.2f} s)")
        assert result["host"] == [1.0] * 4 and result["host_after"] == [2.0] * 2
        assert result["gpu"] == "ok [3.0, 3.0, 3.0, 3.0]", result["gpu"]
        assert result["seconds"] < 60


def all_collectives_worker(ctx: WorkerContext) -> list[str]:
    _setup(ctx, own_host=True)
    me, world = ctx.rank, ctx.world_size
    try:
        x = torch.full((1000,), float(me + 1), device="cuda")
        dist.all_reduce(x)
    except dist.DistBackendError as e:
        return [f"unavailable: {str(e).splitlines()[0][:300]}"]
    failures = []

    def check(name: str, ok: bool) -> None:
        if not ok:
            failures.append(name)

    check("all_reduce", x.eq(3.0).all().item())
    y = torch.full((7,), float(me), device="cuda", dtype=torch.float64)
    dist.all_reduce(y, op=dist.ReduceOp.MAX)
    check("all_reduce max", y.eq(1.0).all().item())
    b = torch.full((5,), float(me * 10), device="cuda", dtype=torch.bfloat16)
    dist.broadcast(b, src=1)
    check("broadcast", b.eq(10.0).all().item())
    r = torch.full((3,), float(me + 1), device="cuda")
    dist.reduce(r, dst=0, op=dist.ReduceOp.PRODUCT)
    check("reduce", r.eq(2.0).all().item() if me == 0 else r.eq(2.0).all().item())
    out = torch.empty(world * 4, device="cuda", dtype=torch.int32)
    dist.all_gather_into_tensor(out, torch.full((4,), me, device="cuda", dtype=torch.int32))
    check("all_gather_into_tensor", out.tolist() == [0] * 4 + [1] * 4)
    parts = [torch.empty(3, device="cuda") for _ in range(world)]
    dist.all_gather(parts, torch.full((3,), float(me), device="cuda"))
    check("all_gather", [p.tolist() for p in parts] == [[0.0] * 3, [1.0] * 3])
    rs = torch.empty(2, device="cuda")
    dist.reduce_scatter_tensor(rs, torch.arange(4.0, device="cuda") + me, op=dist.ReduceOp.SUM)
    check("reduce_scatter_tensor", rs.tolist() == ([1.0, 3.0] if me == 0 else [5.0, 7.0]))
    # Uneven all-to-all: rank 0 sends 1 row to 0 and 2 to 1; rank 1 sends 3 to 0 and 1 to 1.
    sends = [[1, 2], [3, 1]][me]
    recvs = [[1, 3], [2, 1]][me]
    a2a_in = torch.full((sum(sends), 2), float(me), device="cuda")
    a2a_out = torch.empty(sum(recvs), 2, device="cuda")
    dist.all_to_all_single(a2a_out, a2a_in, output_split_sizes=recvs, input_split_sizes=sends)
    expected = [0.0] * recvs[0] * 2 + [1.0] * recvs[1] * 2
    check("all_to_all_single uneven", a2a_out.flatten().tolist() == expected)
    gathered = [torch.empty(2, device="cuda") for _ in range(world)] if me == 0 else None
    dist.gather(torch.full((2,), float(me + 5), device="cuda"), gathered, dst=0)
    if me == 0:
        check("gather", [g.tolist() for g in gathered] == [[5.0, 5.0], [6.0, 6.0]])
    scattered = torch.empty(2, device="cuda")
    sources = [torch.full((2,), float(i + 8), device="cuda") for i in range(world)] if me == 1 else None
    dist.scatter(scattered, sources, src=1)
    check("scatter", scattered.tolist() == [float(me + 8)] * 2)
    if me == 0:
        dist.send(torch.arange(6.0, device="cuda"), dst=1)
    else:
        got = torch.empty(6, device="cuda")
        dist.recv(got, src=0)
        check("send/recv", got.tolist() == list(map(float, range(6))))
    tensors = [torch.full((3,), float(me), device="cuda"), torch.full((5,), 1.0, device="cuda")]
    with dist._coalescing_manager(async_ops=True) as manager:
        for t in tensors:
            dist.all_reduce(t)
    manager.wait()
    check("coalesced all_reduce", tensors[0].eq(1.0).all().item() and tensors[1].eq(2.0).all().item())
    dist.barrier(device_ids=[0])
    torch.cuda.synchronize()
    return failures


def test_every_collective_between_two_ranks_on_one_gpu() -> None:
    results = run_workers_ok(all_collectives_worker, 2, timeout=RUN_TIMEOUT, env=SOCKET_ENV)
    unavailable = [r for r in results if r and r[0].startswith("unavailable")]
    if unavailable:
        pytest.skip(f"NCCL refused two ranks on one GPU even over sockets: {unavailable[0][0]}")
    assert results == [[], []]


def stuck_collective_worker(ctx: WorkerContext, abort_it: bool) -> Any:
    _setup(ctx, own_host=True)
    group = monarch_group(timedelta(seconds=60 if abort_it else 8))
    x = torch.ones(1 << 16, device="cuda")
    dist.all_reduce(x, group=group)  # both ranks: the communicator is up
    torch.cuda.synchronize()
    store = ctx.store()
    if ctx.rank == 1:
        store.wait(["done"], timedelta(seconds=90))  # never joins the second op
        return None
    started = time.monotonic()
    work = dist.all_reduce(x, group=group, async_op=True)
    if abort_it:
        time.sleep(1.0)
        aborting = time.monotonic()
        group.abort() if hasattr(group, "abort") else group._get_backend(torch.device("cuda")).abort()
        abort_seconds = time.monotonic() - aborting
    try:
        work.wait(timeout=timedelta(seconds=30))
        outcome: dict[str, Any] = {"error": None}
    except torch_monarch.MonarchError as e:
        outcome = {"error": type(e).__name__, "ranks": e.failed_ranks, "message": str(e)[:400]}
    outcome["seconds"] = time.monotonic() - started
    if abort_it:
        outcome["abort_seconds"] = abort_seconds
    # The kernel that waited for rank 1 was released: the stream drains.
    syncing = time.monotonic()
    torch.cuda.synchronize()
    outcome["sync_seconds"] = time.monotonic() - syncing
    store.set("done", "1")
    return outcome


def test_peer_that_never_joins_times_out_naming_it() -> None:
    results = run_workers_ok(stuck_collective_worker, 2, False, timeout=RUN_TIMEOUT, env=SOCKET_ENV)
    outcome = results[0]
    print(f"stuck collective, timeout 8 s: {outcome}")
    assert outcome["error"] == "CollectiveTimeoutError", outcome
    assert outcome["ranks"] == [1], outcome
    assert 7.5 < outcome["seconds"] < 20.0, outcome
    assert outcome["sync_seconds"] < 15.0, outcome


def test_abort_frees_a_collective_stuck_on_a_peer() -> None:
    results = run_workers_ok(stuck_collective_worker, 2, True, timeout=RUN_TIMEOUT, env=SOCKET_ENV)
    outcome = results[0]
    print(f"stuck collective, aborted after 1 s: {outcome}")
    assert outcome["error"] == "AbortedError", outcome
    assert outcome["abort_seconds"] < 11.0, outcome
    assert outcome["sync_seconds"] < 15.0, outcome


def init_timeout_worker(ctx: WorkerContext) -> Any:
    _setup(ctx, own_host=False)
    group = monarch_group(timedelta(seconds=3))  # every rank creates the group
    store = ctx.store()
    if ctx.rank == 1:
        store.wait(["done"], timedelta(seconds=90))  # never makes a GPU op
        return None
    started = time.monotonic()
    try:
        dist.all_reduce(torch.ones(4, device="cuda"), group=group)
        outcome: dict[str, Any] = {"error": None}
    except torch_monarch.MonarchError as e:
        outcome = {"error": type(e).__name__, "ranks": e.failed_ranks, "message": str(e)[:400]}
    outcome["seconds"] = time.monotonic() - started
    store.set("done", "1")
    return outcome


def test_communicator_init_times_out_naming_the_missing_rank() -> None:
    results = run_workers_ok(init_timeout_worker, 2, timeout=RUN_TIMEOUT, env={"MONARCH_GPU_TRANSPORT": "nccl"})
    outcome = results[0]
    print(f"communicator init without rank 1: {outcome}")
    assert outcome["error"] == "CollectiveTimeoutError", outcome
    assert outcome["ranks"] == [1], outcome
    assert outcome["seconds"] < 10.0, outcome


def shrink_worker(ctx: WorkerContext) -> Any:
    _setup(ctx, own_host=True)
    x = torch.ones(8, device="cuda")
    dist.all_reduce(x)  # the world's communicator exists, so shrinking can use ncclCommShrink
    torch.cuda.synchronize()
    store = ctx.store()
    if ctx.rank == 1:
        store.wait(["done"], timedelta(seconds=90))
        return None
    backend = dist.group.WORLD._get_backend(torch.device("cuda"))
    shrunk = backend.shrink([1])
    y = torch.full((8,), 5.0, device="cuda")
    shrunk.allreduce([y]).wait()
    torch.cuda.synchronize()
    store.set("done", "1")
    return {"size": shrunk.size(), "value": y.tolist()}


def test_shrink_keeps_the_gpu_path() -> None:
    results = run_workers_ok(shrink_worker, 2, timeout=RUN_TIMEOUT, env=SOCKET_ENV)
    print(f"shrunk to rank 0: {results[0]}")
    assert results[0] == {"size": 1, "value": [5.0] * 8}
