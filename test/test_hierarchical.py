"""Allreduce across hosts: one machine poses as several through
Options.host_name. With the same number of ranks on every host, a large
allreduce reduces within each host first, and across hosts each rank talks
only to the ranks that hold the same block; otherwise it runs flat. Either
way the result is exact and the same on every rank.

- Within a host the hierarchical phases go through shared memory: each rank
  maps the segments of its own host's ranks for the group, and sends them
  next to nothing over the links (with MONARCH_TRANSPORT=tcp: no mapping,
  the payload on the links).
- A host whose ranks cannot all map each other's segments falls back to
  its links on every one of them; the other host still uses its segments.
- SIGKILL of a rank while the others loop hierarchical allreduces: every
  survivor, on either host, gets PeerFailureError naming it within the
  bound, and no segment name is left in /dev/shm.
"""

from __future__ import annotations

import os

import pytest
import torch
import torch.distributed as dist

import torch_monarch
from faults import backend_of
from multiproc import WorkerContext, run_workers, run_workers_ok
from rdma_support import RDMA_ENV, requires_rdma
from reference import Checker, assert_all_passed, rank_input, reference_reduce
from shm_segments import assert_killed_and_named, kill_worker, mapped_segments, pid_of

NUMEL = (1 << 20) + 5  # above the small-message and shared-memory thresholds, blocks of unequal length
# Far less than a rank sends each peer it exchanges these allreduces' data
# with, far more than barriers and setup.
DATA_BYTES = NUMEL


def hosts_worker(ctx: WorkerContext, layout: str, transport: str, unmappable_host: str) -> tuple[int, list[str]]:
    check = Checker(ctx.rank)
    ctx.init("monarch")
    ctx.store().set(f"pid{ctx.rank}", str(os.getpid()))
    options = torch_monarch.Options(host_name=layout[ctx.rank])
    if layout[ctx.rank] == unmappable_host and layout.rindex(unmappable_host) == ctx.rank:
        # The host's last rank has a segment of another size: none of the host's ranks can map all.
        options.shm_segment_bytes = 64 << 10
    group = dist.new_group(backend="monarch", pg_options=options)
    world = ctx.world_size
    before = mapped_segments()
    for seed, (dtype, op) in enumerate([(torch.float32, "SUM"), (torch.bfloat16, "MAX"), (torch.int64, "SUM")]):
        inputs = [rank_input(rank, NUMEL, dtype, seed) for rank in range(world)]
        tensor = inputs[ctx.rank].clone()
        dist.all_reduce(tensor, op=getattr(dist.ReduceOp, op), group=group)
        if seed == 0:
            # Before any op of the default group, which may map segments of its own.
            group_segments = mapped_segments() - before
        check.close(f"{layout} {dtype} {op}", tensor, reference_reduce(inputs, op), op)
        everyone = [torch.empty_like(tensor) for _ in range(world)]
        dist.all_gather(everyone, tensor)
        check.true(f"{layout} {dtype} same bits on every rank", all(torch.equal(t, tensor) for t in everyone))

    sent = backend_of(group).payload_bytes_sent()
    same_host = [r for r in range(world) if r != ctx.rank and layout[r] == layout[ctx.rank]]
    other_hosts = [r for r in range(world) if layout[r] != layout[ctx.rank]]
    if transport in ("auto", "rdma") and layout in ("aabb", "abab") and layout[ctx.rank] != unmappable_host:
        host_pids = sorted(int(ctx.store().get(f"pid{r}")) for r in [ctx.rank, *same_host])
        mapped = sorted(map(pid_of, group_segments))
        check.true(f"{layout}: maps the segments of this host's ranks", mapped == host_pids, str(group_segments))
        check.true(f"{layout}: only barriers to this host's ranks", all(sent[r] < 1024 for r in same_host), str(sent))
    else:
        check.true(f"{layout}: maps no segment", not group_segments, str(group_segments))
        check.true(f"{layout}: data to this host's ranks", all(sent[r] >= DATA_BYTES for r in same_host), str(sent))
    if layout in ("aabb", "abab"):
        # Across hosts only to the rank with the same position on its host.
        def position(rank: int) -> int:
            return [r for r in range(world) if layout[r] == layout[rank]].index(rank)

        (partner,) = [r for r in other_hosts if position(r) == position(ctx.rank)]
        check.true(f"{layout}: data to the partner on the other host", sent[partner] >= DATA_BYTES, str(sent))
        check.true(
            f"{layout}: nothing to other ranks across hosts",
            all(sent[r] == 0 for r in other_hosts if r != partner),
            str(sent),
        )
    else:
        check.true(f"{layout}: flat, data to every rank", all(sent[r] >= DATA_BYTES for r in other_hosts), str(sent))
    if transport == "rdma":
        moved = backend_of(group).transport_bytes()
        check.true(f"{layout}: the cross-host data read by rdma", moved["rdma_read"] >= DATA_BYTES, str(moved))
        check.true(f"{layout}: none of it inline", moved["tcp_sent"] < DATA_BYTES // 8, str(moved))
    return check.report()


@pytest.mark.parametrize(
    "layout, transport, unmappable_host",
    [
        ("aabb", "auto", ""),
        ("abab", "auto", ""),
        ("aaab", "auto", ""),
        ("aabb", "tcp", ""),
        ("abab", "tcp", ""),
        # Host a falls back to its links; host b goes on through its segments.
        ("abab", "auto", "a"),
        pytest.param("aabb", "rdma", "", marks=requires_rdma),
        pytest.param("abab", "rdma", "", marks=requires_rdma),
    ],
)
def test_allreduce_across_hosts(layout: str, transport: str, unmappable_host: str) -> None:
    env = RDMA_ENV if transport == "rdma" else {"MONARCH_TRANSPORT": transport}
    reports = run_workers_ok(hosts_worker, 4, layout, transport, unmappable_host, env=env)
    assert_all_passed(reports, min_checks=9)


def test_kill_during_hierarchical_ops() -> None:
    assert_killed_and_named(run_workers(kill_worker, 4, "aabb", timeout=60))


def phases_worker(ctx: WorkerContext) -> tuple[int, list[str]]:
    """The reduce-scatter and the allgather on one host are two phases of
    one op in the host's shared memory; each must find its own buffers, not
    the other phase's, on tensors read in place (from allocate_tensor), with
    cross-memory copies and through the slots."""
    check = Checker(ctx.rank)
    ctx.init("monarch")
    world = ctx.world_size
    for cross_memory in ("all", "off"):
        options = torch_monarch.Options(host_name="aabb"[ctx.rank], cross_memory=cross_memory)
        group = dist.new_group(backend="monarch", pg_options=options)
        inputs = [rank_input(rank, NUMEL, torch.float32, 4) for rank in range(world)]
        for pooled in (True, False):
            if pooled:
                tensor = backend_of(group).allocate_tensor(NUMEL, dtype=torch.float32, device=torch.device("cpu"))
                tensor.copy_(inputs[ctx.rank])
            else:
                tensor = inputs[ctx.rank].clone()
            dist.all_reduce(tensor, group=group)
            label = f"cross_memory={cross_memory}, {'pooled' if pooled else 'ordinary'} tensors"
            check.close(label, tensor, reference_reduce(inputs, "SUM"))
    dist.destroy_process_group()
    return check.report()


def test_each_phase_on_a_host_finds_its_own_buffers() -> None:
    assert_all_passed(run_workers_ok(phases_worker, 4), min_checks=4)
