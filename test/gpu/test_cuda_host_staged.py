"""The host-staged route: CUDA tensors of ranks that share one GPU.

NCCL refuses two ranks on one GPU, so a group whose ranks share a device
stages its CUDA tensors through pinned host memory and runs the host
algorithms (csrc/gpu/host_staged_backend.cc). Checked here, with 2 and 4
ranks on the one GPU: the route is chosen on its own; every collective on
CUDA tensors equals the same collective on CPU tensors in the same group (the
host path, the reference); host and CUDA ops mix in one group; the copies are
ordered on the CUDA streams; and a peer killed, stopped or aborting is named
by the survivors within the host path's bounds.
"""

from __future__ import annotations

import os
import signal
import time
from datetime import timedelta
from typing import Any, Callable

import pytest
import torch
import torch.distributed as dist

import torch_monarch
from faults import attempt, kill_and_wait, read_stamp, signal_self
from gpu_helpers import premul_sum, spin
from multiproc import WorkerContext, run_workers, run_workers_ok

pytestmark = pytest.mark.cuda

RUN_TIMEOUT = 180.0
HEARTBEAT_S = 2.0
# The host path's bounds (test_faults_kill.py, test_faults_stop.py, test_abort.py).
KILL_DETECT_BOUND_S = 0.5
STOP_DETECT_BOUND_S = HEARTBEAT_S + 1.0
ABORT_DETECT_BOUND_S = 1.0
FAIL_FAST_BOUND_S = 0.5
STAGED = "monarch-host-staged"


def _init(ctx: WorkerContext, **options: Any) -> None:
    torch.cuda.set_device(0)
    ctx.init("monarch", timeout=timedelta(seconds=60), pg_options=torch_monarch.Options(**options))


def _route() -> str:
    return dist.group.WORLD._get_backend(torch.device("cuda")).device_backend_name()


def _data(rank: int, shape: tuple[int, ...], dtype: torch.dtype, salt: int) -> torch.Tensor:
    """Rank-specific inputs, the same for the CPU and the CUDA run."""
    generator = torch.Generator().manual_seed(1000 * salt + rank)
    if dtype.is_floating_point:
        return torch.randn(shape, generator=generator).to(dtype)
    return torch.randint(1, 7, shape, generator=generator, dtype=dtype)


def _ops(me: int, n: int) -> dict[str, Callable[[str], list[torch.Tensor]]]:
    """Each op on tensors of one device; returns what it wrote."""

    def all_reduce(dtype: torch.dtype, op: Any, numel: int, salt: int) -> Callable[[str], list[torch.Tensor]]:
        def run(device: str) -> list[torch.Tensor]:
            x = _data(me, (numel,), dtype, salt).to(device)
            dist.all_reduce(x, op=op)
            return [x]

        return run

    def non_contiguous(device: str) -> list[torch.Tensor]:
        x = _data(me, (64, 48), torch.float32, 7).to(device).t()
        dist.all_reduce(x)
        return [x]

    def broadcast(device: str) -> list[torch.Tensor]:
        x = _data(me, (333,), torch.float16, 8).to(device)
        dist.broadcast(x, src=n - 1)
        return [x]

    def reduce(device: str) -> list[torch.Tensor]:
        x = _data(me, (129,), torch.float32, 9).to(device)
        dist.reduce(x, dst=0, op=dist.ReduceOp.SUM)
        return [x] if me == 0 else []

    def all_gather(device: str) -> list[torch.Tensor]:
        parts = [torch.empty(17, device=device) for _ in range(n)]
        dist.all_gather(parts, _data(me, (17,), torch.float32, 10).to(device))
        return parts

    def all_gather_into_tensor(device: str) -> list[torch.Tensor]:
        out = torch.empty(n * 1000, dtype=torch.int32, device=device)
        dist.all_gather_into_tensor(out, _data(me, (1000,), torch.int32, 11).to(device))
        return [out]

    def reduce_scatter_tensor(device: str) -> list[torch.Tensor]:
        out = torch.empty(500, device=device)
        dist.reduce_scatter_tensor(out, _data(me, (n * 500,), torch.float32, 12).to(device))
        return [out]

    def reduce_scatter(device: str) -> list[torch.Tensor]:
        out = torch.empty(31, dtype=torch.float64, device=device)
        inputs = [_data(me, (31,), torch.float64, 13 + j).to(device) for j in range(n)]
        dist.reduce_scatter(out, inputs, op=dist.ReduceOp.MAX)
        return [out]

    def all_to_all_single_uneven(device: str) -> list[torch.Tensor]:
        sends = [me + j + 1 for j in range(n)]  # rows this rank sends to rank j
        recvs = [j + me + 1 for j in range(n)]  # rows rank j sends here
        out = torch.empty(sum(recvs), 3, device=device)
        dist.all_to_all_single(out, _data(me, (sum(sends), 3), torch.float32, 20).to(device), recvs, sends)
        return [out]

    def all_to_all(device: str) -> list[torch.Tensor]:
        outs = [torch.empty(5, device=device) for _ in range(n)]
        dist.all_to_all(outs, [_data(me, (5,), torch.float32, 21 + j).to(device) for j in range(n)])
        return outs

    def gather(device: str) -> list[torch.Tensor]:
        outs = [torch.empty(9, device=device) for _ in range(n)] if me == 0 else None
        dist.gather(_data(me, (9,), torch.float32, 30).to(device), outs, dst=0)
        return outs or []

    def scatter(device: str) -> list[torch.Tensor]:
        out = torch.empty(11, device=device)
        sources = [_data(j, (11,), torch.float32, 31).to(device) for j in range(n)] if me == 1 else None
        dist.scatter(out, sources, src=1)
        return [out]

    def send_recv_ring(device: str) -> list[torch.Tensor]:
        got = torch.empty(77, device=device)
        mine = _data(me, (77,), torch.float32, 40).to(device)
        if me % 2 == 0:
            dist.send(mine, dst=(me + 1) % n)
            dist.recv(got, src=(me - 1) % n)
        else:
            dist.recv(got, src=(me - 1) % n)
            dist.send(mine, dst=(me + 1) % n)
        return [got]

    def coalesced_all_reduce(device: str) -> list[torch.Tensor]:
        tensors = [_data(me, (3,), torch.float32, 50).to(device), _data(me, (50,), torch.float32, 51).to(device)]
        with dist._coalescing_manager(async_ops=True) as manager:
            for t in tensors:
                dist.all_reduce(t)
        manager.wait()
        return tensors

    return {
        "all_reduce sum f32": all_reduce(torch.float32, dist.ReduceOp.SUM, 1000, 1),
        "all_reduce sum f32 4 MiB (shared memory)": all_reduce(torch.float32, dist.ReduceOp.SUM, 1 << 20, 2),
        "all_reduce max f64": all_reduce(torch.float64, dist.ReduceOp.MAX, 257, 3),
        "all_reduce avg bf16": all_reduce(torch.bfloat16, dist.ReduceOp.AVG, 1025, 4),
        "all_reduce product i32": all_reduce(torch.int32, dist.ReduceOp.PRODUCT, 64, 5),
        "all_reduce band i64": all_reduce(torch.int64, dist.ReduceOp.BAND, 64, 6),
        "all_reduce premul_sum f32": all_reduce(torch.float32, premul_sum(0.5), 100, 14),
        "all_reduce zero-size": all_reduce(torch.float32, dist.ReduceOp.SUM, 0, 15),
        "all_reduce non-contiguous": non_contiguous,
        "broadcast f16": broadcast,
        "reduce": reduce,
        "all_gather": all_gather,
        "all_gather_into_tensor i32": all_gather_into_tensor,
        "reduce_scatter_tensor": reduce_scatter_tensor,
        "reduce_scatter max f64": reduce_scatter,
        "all_to_all_single uneven": all_to_all_single_uneven,
        "all_to_all": all_to_all,
        "gather": gather,
        "scatter": scatter,
        "send/recv ring": send_recv_ring,
        "coalesced all_reduce": coalesced_all_reduce,
    }


def every_collective_worker(ctx: WorkerContext) -> dict[str, Any]:
    _init(ctx)
    me, n = ctx.rank, ctx.world_size
    failures = []
    for name, op in _ops(me, n).items():
        reference = op("cpu")  # the host path, same group
        try:
            staged = op("cuda")
        except Exception as e:  # noqa: BLE001 - reported per op
            failures.append(f"{name}: raised {type(e).__name__}: {str(e)[:300]}")
            continue
        if any(t.device.type != "cuda" for t in staged):
            failures.append(f"{name}: an output left the GPU")
        for expected, got in zip(reference, staged):
            if not torch.equal(expected, got.cpu()):
                failures.append(f"{name}: differs from the CPU reference by {(expected.double() - got.cpu().double()).abs().max()}")
                break
    dist.barrier(device_ids=[0])
    torch.cuda.synchronize()
    return {"route": _route(), "failures": failures}


@pytest.mark.parametrize("world_size", [2, 4])
def test_every_collective_matches_the_cpu_reference(world_size: int) -> None:
    results = run_workers_ok(every_collective_worker, world_size, timeout=RUN_TIMEOUT)
    for rank, result in enumerate(results):
        assert result["route"] == STAGED, f"rank {rank} took {result['route']!r}"
        assert result["failures"] == [], f"rank {rank}: {result['failures']}"


def mixed_worker(ctx: WorkerContext) -> dict[str, Any]:
    _init(ctx)
    me, n = ctx.rank, ctx.world_size
    expected = float(sum(range(1, n + 1)))
    checks: dict[str, bool] = {}
    # Inputs written by a kernel still queued behind a busy stream: the copy
    # to the host must wait for it, with no synchronisation by the caller.
    x = torch.zeros(1 << 18, device="cuda")
    spin(0.3)
    x.fill_(float(me + 1))
    dist.all_reduce(x)
    checks["ordered after the caller's stream"] = bool(x.eq(expected).all())
    # Host and CUDA ops in flight together, in one group, waited out of order.
    gpu = torch.full((4096,), float(me + 1), device="cuda")
    host = torch.full((4096,), float(me + 1))
    gpu_work = dist.all_reduce(gpu, async_op=True)
    host_work = dist.all_reduce(host, async_op=True)
    host_work.wait()
    gpu_work.wait()
    checks["host op beside a CUDA op"] = bool(host.eq(expected).all())
    checks["CUDA op beside a host op"] = bool(gpu.eq(expected).all())
    # The future's value is usable on the caller's stream once it is done.
    y = torch.full((100,), float(me + 1), device="cuda")
    value = dist.all_reduce(y, async_op=True).get_future().wait()[0]
    checks["future value"] = bool((value * 2).eq(2 * expected).all())
    checks["route"] = _route() == STAGED
    torch.cuda.synchronize()
    return checks


def test_host_and_cuda_tensors_in_one_group() -> None:
    results = run_workers_ok(mixed_worker, 2, timeout=RUN_TIMEOUT)
    for rank, checks in enumerate(results):
        assert all(checks.values()), f"rank {rank}: {checks}"


def fault_worker(ctx: WorkerContext, mode: str) -> dict[str, Any]:
    _init(ctx, heartbeat_timeout=HEARTBEAT_S, timeout=timedelta(seconds=30))
    victim = ctx.world_size - 1
    stamp = f"{ctx.tmp_dir}/stamp"
    x = torch.ones(1 << 20, device="cuda")
    for _ in range(3):
        dist.all_reduce(x)  # the route is up on every rank
    torch.cuda.synchronize()
    store = ctx.store()
    store.set(f"pid{ctx.rank}", str(os.getpid()))
    store.set(f"ready{ctx.rank}", "1")
    store.wait([f"ready{r}" for r in range(ctx.world_size)], timedelta(seconds=60))
    if ctx.rank == victim:
        for step in range(1000):
            if step == 5:
                if mode == "abort":
                    with open(stamp, "w") as f:
                        f.write(repr(time.monotonic()))
                    dist.group.WORLD._get_backend(torch.device("cpu")).abort()
                    store.wait(["survivors done"], timedelta(seconds=90))
                    return {}
                signal_self(signal.SIGKILL if mode == "kill" else signal.SIGSTOP, stamp)
            dist.all_reduce(x)
    route = _route()
    failure = None
    for _ in range(1000):
        failure = attempt(lambda: (dist.all_reduce(x), torch.cuda.synchronize()))
        if not failure.ok:
            break
    assert failure is not None and not failure.ok, "no op failed"
    detect_s = failure.ended - read_stamp(stamp)
    later = attempt(lambda: dist.all_reduce(torch.ones(8, device="cuda")))
    later_host = attempt(lambda: dist.all_reduce(torch.ones(8)))
    store.set(f"detected{ctx.rank}", "1")
    if ctx.rank == 0:
        store.wait([f"detected{r}" for r in range(victim)], timedelta(seconds=60))
        if mode == "stop":
            kill_and_wait(int(store.get(f"pid{victim}")))  # a stopped process never reports
        store.set("survivors done", "1")
    return {
        "route": route,
        "failure": failure.class_names[0],
        "is_peer_failure": failure.is_a("PeerFailureError"),
        "ranks": list(failure.failed_ranks),
        "detect_s": detect_s,
        "message": failure.message[:300],
        "later_fails_fast": not later.ok and later.elapsed_s < FAIL_FAST_BOUND_S and later.is_a("DistBackendError"),
        "host_later_fails": not later_host.ok,
    }


@pytest.mark.parametrize(
    "mode,bound_s", [("kill", KILL_DETECT_BOUND_S), ("stop", STOP_DETECT_BOUND_S), ("abort", ABORT_DETECT_BOUND_S)]
)
def test_peer_failure_on_the_shared_gpu_names_the_rank(mode: str, bound_s: float) -> None:
    world = 3
    results = run_workers(fault_worker, world, mode, timeout=RUN_TIMEOUT)
    for rank in range(world - 1):
        result = results[rank]
        assert result.error is None, f"rank {rank}: {result.error}"
        outcome = result.value
        print(f"{mode}: rank {rank} {outcome}")
        assert outcome["route"] == STAGED
        assert outcome["is_peer_failure"], outcome
        assert outcome["ranks"] == [world - 1], outcome
        assert outcome["detect_s"] < bound_s, outcome
        if mode == "stop":
            assert outcome["detect_s"] > HEARTBEAT_S * 0.5, outcome  # heartbeats, not a closed socket
        assert outcome["later_fails_fast"] and outcome["host_later_fails"], outcome
