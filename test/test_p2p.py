"""Point-to-point: tagged send/recv (matched by tag, not arrival order),
isend/irecv, receives from any source, and p2p interleaved with collectives.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
import torch
import torch.distributed as dist

from monarch_groups import transport_env
from multiproc import WorkerContext, run_workers_ok
from rdma_support import requires_rdma
from reference import ALL_DTYPES, Checker, assert_all_passed, large_numel, rank_input

TIMEOUT = timedelta(seconds=60)
# "rdma": every rank a host of its own, payloads by RDMA read (monarch_groups.py).
TRANSPORTS = ["auto", pytest.param("rdma", marks=requires_rdma)]


def tagged_worker(ctx: WorkerContext) -> tuple[int, list[str]]:
    """Ring of sends: every rank sends to rank+1 and receives from rank-1,
    every dtype, sizes 0/1/odd/large; tags are received in reverse order."""
    check = Checker(ctx.rank)
    ctx.init("monarch", timeout=TIMEOUT)
    world, me = ctx.world_size, ctx.rank
    right, left = (me + 1) % world, (me - 1) % world
    for seed, dtype in enumerate(ALL_DTYPES):
        for numel in (0, 1, 1023, large_numel(dtype)):
            label = f"{dtype} numel={numel}"
            # Two messages with different tags; the receiver asks for the
            # second tag first, so only tag matching gets this right.
            sends = [
                dist.isend(rank_input(me, numel, dtype, seed * 2 + k), dst=right, tag=10 + k) for k in range(2)
            ]
            second = torch.empty(numel, dtype=dtype)
            first = torch.empty(numel, dtype=dtype)
            got_second = dist.irecv(second, src=left, tag=11)
            got_first = dist.irecv(first, src=left, tag=10)
            for work in sends + [got_second, got_first]:
                work.wait()
            check.close(f"tag 10 {label}", first, rank_input(left, numel, dtype, seed * 2))
            check.close(f"tag 11 {label}", second, rank_input(left, numel, dtype, seed * 2 + 1))
    # Blocking send/recv between a pair, a non-contiguous receive buffer, and
    # several messages on one tag arriving in order.
    if me == 0:
        for k in range(3):
            dist.send(torch.arange(20, dtype=torch.float32).view(4, 5) + k, dst=1, tag=7)
    elif me == 1:
        for k in range(3):
            buffer = torch.empty(5, 4).t()
            dist.recv(buffer, src=0, tag=7)
            check.close(f"same tag message {k}", buffer, torch.arange(20, dtype=torch.float32).view(4, 5) + k)
    # P2P and collectives interleave on the same group.
    tensor = torch.full((3,), float(me))
    dist.all_reduce(tensor)
    check.close("all_reduce after p2p", tensor, torch.full((3,), float(sum(range(world)))))
    return check.report()


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_tagged_send_recv(transport: str) -> None:
    assert_all_passed(run_workers_ok(tagged_worker, 3, env=transport_env(transport)), min_checks=90)


def any_source_worker(ctx: WorkerContext) -> tuple[int, list[str]]:
    """Rank 0 receives from whoever sends (src=None) and learns the sender."""
    check = Checker(ctx.rank)
    ctx.init("monarch", timeout=TIMEOUT)
    world, me = ctx.world_size, ctx.rank
    rounds = 3
    if me == 0:
        senders: list[int] = []
        for _ in range(rounds * (world - 1)):
            buffer = torch.empty(64, dtype=torch.int64)
            sender = dist.recv(buffer, src=None, tag=5)
            senders.append(sender)
            # Sender s sends s * 1000 + round in every element.
            check.true("payload from the reported sender", bool((buffer // 1000 == sender).all()), f"{buffer[:3]}")
            check.true(f"sender {sender} in range", 1 <= sender < world)
        check.true(
            "every sender heard rounds times",
            sorted(senders) == sorted(list(range(1, world)) * rounds),
            f"senders: {senders}",
        )
        # Async form: the work reports the source rank once done.
        works = []
        for _ in range(world - 1):
            buffer = torch.empty(1, dtype=torch.int64)
            works.append((dist.irecv(buffer, src=None, tag=6), buffer))
        seen = []
        for work, buffer in works:
            work.wait()
            source = work._source_rank()
            seen.append(source)
            check.true("irecv source matches payload", int(buffer.item()) == source, f"{source} vs {buffer.item()}")
        check.true("irecv heard every rank", sorted(seen) == list(range(1, world)), f"seen: {seen}")
    else:
        for k in range(rounds):
            dist.send(torch.full((64,), me * 1000 + k, dtype=torch.int64), dst=0, tag=5)
        dist.send(torch.tensor([me], dtype=torch.int64), dst=0, tag=6)
        check.true("sender", True)
    dist.barrier()
    return check.report()


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_recv_from_any_source(transport: str) -> None:
    assert_all_passed(run_workers_ok(any_source_worker, 4, env=transport_env(transport)), min_checks=1)
