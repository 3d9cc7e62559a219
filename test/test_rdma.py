"""The rdma transport: large payloads to peers on other hosts go by RDMA read
(libfabric), here through its tcp provider on loopback, each rank posing as a
host of its own through ``Options.host_name``.

- The data moves through RDMA, not the TCP links: the links' counters show
  the payload bytes read by fi_read and only small frames sent inline, and
  every result is exact.
- Within one host RDMA is never used (shared memory and remote reads are).
- A missing libfabric or an unknown provider raises RdmaUnavailableError
  when the group is created, naming what is missing; "auto" then keeps TCP.
- After the groups are destroyed no libfabric endpoint, registration, fd or
  thread is left. The fault drills (kill -9, SIGSTOP, abort) over the rdma
  transport are in test_faults_kill.py, test_faults_stop.py and test_abort.py.
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

import torch_monarch
from faults import backend_of, settled_baseline, teardown_leaks
from multiproc import WorkerContext, run_workers, run_workers_ok
from rdma_support import RDMA_ENV, requires_rdma, what_a_missing_libfabric_names
from reference import Checker, assert_all_passed, rank_input, reference_reduce

NUMEL = (1 << 20) + 3  # 4 MiB of float32: far above rdma_min_bytes
# Frames other than payloads (barriers, small setup ops) stay far below this.
SMALL_INLINE_BYTES = 64 * 1024


def across_hosts_worker(ctx: WorkerContext) -> dict[str, object]:
    check = Checker(ctx.rank)
    baseline = settled_baseline()
    ctx.init("monarch")
    world, rank = ctx.world_size, ctx.rank
    backend = backend_of(dist.group.WORLD)
    check.true("provider is the forced one", backend.rdma_provider() == "tcp;ofi_rxm", backend.rdma_provider())

    inputs = [rank_input(r, NUMEL, torch.float32) for r in range(world)]
    tensor = inputs[rank].clone()
    dist.all_reduce(tensor)
    check.close("all_reduce", tensor, reference_reduce(inputs, "SUM"), "SUM")

    block = NUMEL // world
    send = torch.cat([torch.full((block,), float(rank * 100 + peer)) for peer in range(world)])
    received = torch.empty_like(send)
    dist.all_to_all_single(received, send)
    expected = torch.cat([torch.full((block,), float(peer * 100 + rank)) for peer in range(world)])
    check.true("all_to_all_single", torch.equal(received, expected))

    payload = torch.arange(NUMEL, dtype=torch.float32) + rank
    if rank == 0:
        dist.send(payload, dst=1)
    elif rank == 1:
        got = torch.empty(NUMEL, dtype=torch.float32)
        dist.recv(got, src=0)
        check.true("send/recv", torch.equal(got, torch.arange(NUMEL, dtype=torch.float32)))

    root = world - 1
    cast = payload.clone() if rank == root else torch.empty(NUMEL)
    dist.broadcast(cast, src=root)
    check.true("broadcast", torch.equal(cast, torch.arange(NUMEL, dtype=torch.float32) + root))

    dist.barrier()
    counters = dict(backend.transport_bytes())
    # Each rank reads at least a block of every op from its peers.
    check.true("payload read by rdma", counters["rdma_read"] >= 4 * NUMEL, str(counters))
    check.true("only small frames inline on TCP", counters["tcp_sent"] < SMALL_INLINE_BYTES, str(counters))
    check.true("no fallback to TCP", counters["rdma_fallbacks"] == 0, str(counters))
    check.true("no same-host remote read", counters["remote_read"] == 0, str(counters))
    del backend
    leaks = teardown_leaks(baseline)
    check.true("no endpoint, registration, fd or thread left", not leaks, "; ".join(leaks))
    return check.report()


@requires_rdma
@pytest.mark.parametrize("world_size", [2, 3])
def test_payloads_go_by_rdma_between_hosts(world_size: int) -> None:
    env = {**RDMA_ENV, "MONARCH_HOST_NAME": "host{rank}"}
    assert_all_passed(run_workers_ok(across_hosts_worker, world_size, env=env), min_checks=9)


def one_host_worker(ctx: WorkerContext) -> dict[str, object]:
    check = Checker(ctx.rank)
    ctx.init("monarch")
    payload = torch.arange(NUMEL, dtype=torch.float32)
    if ctx.rank == 0:
        dist.send(payload, dst=1)
    else:
        got = torch.empty(NUMEL)
        dist.recv(got, src=0)
        check.true("send/recv", torch.equal(got, payload))
    dist.barrier()
    counters = dict(backend_of(dist.group.WORLD).transport_bytes())
    check.true("no rdma within a host", counters["rdma_read"] == 0, str(counters))
    moved = counters["remote_read"] + counters["tcp_sent"]
    check.true("payload by remote read or TCP", moved >= (4 * NUMEL if ctx.rank == 1 else 0), str(counters))
    return check.report()


@requires_rdma
def test_one_host_never_uses_rdma() -> None:
    env = {**RDMA_ENV, "MONARCH_HOST_NAME": "one-host"}
    assert_all_passed(run_workers_ok(one_host_worker, 2, env=env), min_checks=2)


def hierarchical_worker(ctx: WorkerContext) -> dict[str, object]:
    check = Checker(ctx.rank)
    ctx.init("monarch", pg_options=torch_monarch.Options(host_name="ab"[ctx.rank // 2]))
    inputs = [rank_input(r, NUMEL, torch.float32, seed=1) for r in range(ctx.world_size)]
    tensor = inputs[ctx.rank].clone()
    dist.all_reduce(tensor)
    check.close("hierarchical all_reduce", tensor, reference_reduce(inputs, "SUM"), "SUM")
    counters = dict(backend_of(dist.group.WORLD).transport_bytes())
    # Across hosts only to the partner, a half of the tensor each way.
    check.true("cross-host phase by rdma", counters["rdma_read"] >= 4 * NUMEL // 2 // 2, str(counters))
    check.true("only small frames inline", counters["tcp_sent"] < SMALL_INLINE_BYTES, str(counters))
    return check.report()


@requires_rdma
def test_hierarchical_allreduce_crosses_hosts_by_rdma() -> None:
    assert_all_passed(run_workers_ok(hierarchical_worker, 4, env=RDMA_ENV), min_checks=3)


def creation_error_worker(ctx: WorkerContext) -> str:
    try:
        ctx.init("monarch")
    except torch_monarch.RdmaUnavailableError as error:
        return str(error)
    raise AssertionError("the group was created")


@requires_rdma
def test_unknown_provider_is_a_clear_error() -> None:
    env = {**RDMA_ENV, "MONARCH_RDMA_PROVIDER": "no-such-provider", "MONARCH_HOST_NAME": "host{rank}"}
    for message in run_workers_ok(creation_error_worker, 2, env=env, timeout=60):
        assert "no-such-provider" in message and "rdma_provider" in message, message


def test_missing_libfabric_names_what_to_install() -> None:
    library = "/nonexistent/libfabric.so.1"
    env = {**RDMA_ENV, "MONARCH_LIBFABRIC_LIBRARY": library, "MONARCH_HOST_NAME": "host{rank}"}
    for message in run_workers_ok(creation_error_worker, 2, env=env, timeout=60):
        for words in what_a_missing_libfabric_names(library):
            assert words in message, message


def auto_without_libfabric_worker(ctx: WorkerContext) -> dict[str, object]:
    check = Checker(ctx.rank)
    ctx.init("monarch")
    tensor = torch.full((NUMEL,), float(ctx.rank + 1))
    dist.all_reduce(tensor)
    check.true("all_reduce over TCP", torch.equal(tensor, torch.full((NUMEL,), 3.0)))
    backend = backend_of(dist.group.WORLD)
    check.true("no rdma provider", backend.rdma_provider() == "", backend.rdma_provider())
    check.true("payload on TCP", backend.transport_bytes()["tcp_sent"] >= 2 * NUMEL, str(backend.transport_bytes()))
    return check.report()


def test_auto_keeps_tcp_without_libfabric() -> None:
    env = {
        "MONARCH_TRANSPORT": "auto",
        "MONARCH_LIBFABRIC_LIBRARY": "/nonexistent/libfabric.so.1",
        "MONARCH_HOST_NAME": "host{rank}",
    }
    assert_all_passed(run_workers_ok(auto_without_libfabric_worker, 2, env=env), min_checks=3)


def test_auto_never_picks_a_software_provider() -> None:
    # No verbs or efa here: "auto" must not fall back to libfabric's tcp provider.
    env = {"MONARCH_TRANSPORT": "auto", "FI_TCP_IFACE": "lo", "MONARCH_HOST_NAME": "host{rank}"}
    results = run_workers(auto_without_libfabric_worker, 2, env=env)
    for result in results:
        assert result.ok, result.error.traceback if result.error else result.problem
