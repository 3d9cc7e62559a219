"""The shared-memory transport: a group whose ranks all run on one host moves
large collectives through a segment per rank that every rank maps.

- The data goes through the segments: each rank maps every rank's segment,
  only barrier frames go over the links, and the results are right (with
  MONARCH_TRANSPORT=tcp the same test sees no mapping and the payload on the
  links, so it can tell the two apart).
- A segment's name leaves /dev/shm as soon as the peers have mapped it:
  nothing is found there while the job runs, and nothing after kill -9.
- A stale segment left by a dead process (a job killed while its group was
  setting up) is removed by the next group on the host; a live process's
  segment is left alone.
- A rank that cannot set up its segment (here: a different segment size)
  makes every rank fall back to the links, with right results.
- SIGKILL during a loop of shared-memory allreduces, or reduce-scatters
  (whose ranks read the victim's slots without a barrier): every survivor gets
  PeerFailureError naming the victim within the bound, abort() unmaps the
  segments at once, and after destroy_process_group no mapping, thread or
  fd is left.
- A peer stopped in the middle of a shared-memory op, with heartbeats too
  slow to notice: the op times out with CollectiveTimeoutError naming it,
  on every survivor (worlds 2 and 3).
- An allreduce's tiles are reduced by whichever thread of whichever rank
  claims them, always in rank order: every rank and every repeat gets the
  same float32 bits.
- Reduce-scatter and allgather over many rounds of small slots, two threads
  per rank, blocks of an odd length, back to back with other ops: right
  results, and reduce_scatter_tensor leaves its input as it was (it reads
  the input where it lies); all_gather_into_tensor right also with its
  input inside its output, as FSDP calls it; reduce to every root leaves
  the other ranks' tensors as they were; gathers to every root go in
  rounds and scatters from every root are right.
- Gathers and all_to_alls larger than a slot go through the segments in
  rounds (an all_to_all's uneven blocks too), and so do scatters in a group of two; a group of three scatters over the
  links (each receiver reads its block out of the root's memory).
- A rank that waits in shared memory for a peer 2 s late sleeps in the
  kernel: it uses little CPU meanwhile.
- Senders of small gathers, with empty ops between them, run ahead of a
  root that falls behind: no false mismatch (a rank's signature stamp is
  replaced only once every peer has read it) and right results.

The collective suites (test_reductions.py, test_data_movement.py) cover
every collective, dtype and op through shared memory (transport "shm").
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import threading
import time
from datetime import timedelta
from typing import Any

import pytest
import torch
import torch.distributed as dist

import torch_monarch
from faults import attempt, backend_of, kill_and_wait, process_state, wait_until
from multiproc import WorkerContext, run_workers, run_workers_ok
from reference import Checker, assert_all_passed, rank_input, reference_reduce
from shm_segments import NUMEL, SHM_DIR, assert_killed_and_named, kill_worker, mapped_segments, names_of

STUCK_OP_TIMEOUT = timedelta(seconds=2)
# Naming the stuck rank may wait for its answer to a progress query.
TIMEOUT_SLACK_S = 2.0


def _bytes_sent(group: dist.ProcessGroup) -> int:
    return sum(backend_of(group).payload_bytes_sent())


def through_segments_worker(ctx: WorkerContext, transport: str) -> tuple[int, list[str]]:
    check = Checker(ctx.rank)
    ctx.init("monarch")
    n = ctx.world_size
    inputs = [rank_input(rank, NUMEL, torch.float32, 3) for rank in range(n)]
    sent_before = _bytes_sent(dist.group.WORLD)

    tensor = inputs[ctx.rank].clone()
    dist.all_reduce(tensor)
    check.close("all_reduce", tensor, reference_reduce(inputs, "SUM"))
    # Everyone's names are gone once the first op is over.
    check.true("no name in /dev/shm during the job", not names_of(os.getpid()), str(names_of(os.getpid())))

    gathered = torch.empty(n * NUMEL)
    dist.all_gather_into_tensor(gathered, inputs[ctx.rank])
    check.close("all_gather_into_tensor", gathered, torch.cat(inputs))

    block = NUMEL // n
    mine = torch.empty(block)
    dist.reduce_scatter_tensor(mine, inputs[ctx.rank][: block * n].clone())
    expected = reference_reduce([x[: block * n] for x in inputs], "SUM").view(n, block)[ctx.rank]
    check.close("reduce_scatter_tensor", mine, expected)

    tensor = inputs[ctx.rank].clone()
    dist.broadcast(tensor, src=n - 1)
    check.close("broadcast", tensor, inputs[n - 1])

    # 64 MB and more: the results are written with streaming stores, in
    # tiles for large messages (shared_blocks.cc); an odd length leaves
    # unaligned tails in every block.
    large = [rank_input(rank, (64 << 20) // 4 + 5, torch.float32, 4) for rank in range(n)]
    tensor = large[ctx.rank].clone()
    dist.all_reduce(tensor)
    check.close("all_reduce of 64 MB", tensor, reference_reduce(large, "SUM"))
    gathered = torch.empty(n * large[0].numel())
    dist.all_gather_into_tensor(gathered, large[ctx.rank])
    check.close("all_gather_into_tensor of 64 MB blocks", gathered, torch.cat(large))
    block = large[0].numel() // n  # not a whole number of tiles
    mine = torch.empty(block)
    dist.reduce_scatter_tensor(mine, large[ctx.rank][: block * n])
    expected = reference_reduce([x[: block * n] for x in large], "SUM").view(n, block)[ctx.rank]
    check.close("reduce_scatter_tensor of 64 MB", mine, expected)
    # bfloat16, combined in float in a scratch tile before its streaming store.
    halves = [x[: block * n].to(torch.bfloat16) for x in large]
    # Twice each rank's blocks: a 64 MB message in two-byte elements.
    mine = torch.empty(2 * block, dtype=torch.bfloat16)
    dist.reduce_scatter_tensor(mine, torch.cat([halves[ctx.rank], halves[ctx.rank]]))
    expected = reference_reduce([torch.cat([x, x]) for x in halves], "SUM").view(n, 2 * block)
    check.close("reduce_scatter_tensor of 64 MB in bfloat16", mine, expected[ctx.rank])
    # An all_to_all of 64 MB per rank: several rounds.
    exchanged = torch.empty_like(large[ctx.rank][: block * n])
    dist.all_to_all_single(exchanged, large[ctx.rank][: block * n])
    want = torch.cat([x[: block * n].view(n, block)[ctx.rank] for x in large])
    check.close("all_to_all_single of 64 MB", exchanged, want)
    # A gather of blocks larger than a slot: several rounds.
    root = n - 1
    blocks = [torch.empty_like(large[0]) for _ in range(n)] if ctx.rank == root else None
    dist.gather(large[ctx.rank], gather_list=blocks, dst=root)
    if blocks is not None:
        check.close("gather of 64 MB blocks", torch.cat(blocks), torch.cat(large))
    del gathered, halves, blocks, exchanged

    payload = 4 * NUMEL
    sent = _bytes_sent(dist.group.WORLD) - sent_before
    mapped = mapped_segments()
    if transport == "auto":
        check.true("maps every rank's segment", len(mapped) == n, str(sorted(mapped)))
        check.true("only barriers on the links", sent < 1024, f"{sent} payload bytes sent")
    else:
        check.true("maps no segment", not mapped, str(sorted(mapped)))
        check.true("payload on the links", sent >= payload, f"{sent} payload bytes sent")

    # A scatter of blocks larger than a slot goes in rounds in a group of
    # two; in a larger one each receiver reads its block out of the root's
    # memory over the links, all at once.
    block_bytes = large[0].numel() * 4
    mine = torch.empty_like(large[0])
    pair = dist.new_group([0, 1], backend="monarch")
    if ctx.rank < 2:
        before = _bytes_sent(pair)
        dist.scatter(mine, scatter_list=large[:2] if ctx.rank == 0 else None, src=0, group=pair)
        check.close("scatter of 64 MB blocks in a pair", mine, large[ctx.rank])
        sent = _bytes_sent(pair) - before
        if transport == "auto":
            check.true("a pair's scatter goes through the segments", sent < 1024, f"{sent} payload bytes sent")
    before = _bytes_sent(dist.group.WORLD)
    dist.scatter(mine, scatter_list=large if ctx.rank == 0 else None, src=0)
    check.close("scatter of 64 MB blocks", mine, large[ctx.rank])
    if ctx.rank == 0:
        sent = _bytes_sent(dist.group.WORLD) - before
        want = (n - 1) * block_bytes
        check.true(f"a group of {n} scatters its blocks over the links", sent >= want, f"{sent} of {want} bytes")
    del large
    return check.report()


@pytest.mark.parametrize("transport", ["auto", "tcp"])
def test_collectives_go_through_the_segments(transport: str) -> None:
    reports = run_workers_ok(through_segments_worker, 3, transport, env={"MONARCH_TRANSPORT": transport})
    assert_all_passed(reports, min_checks=14)


def rank_order_worker(ctx: WorkerContext) -> tuple[int, list[str]]:
    check = Checker(ctx.rank)
    ctx.init("monarch")
    # Two threads per rank and rounds of 256 KiB: the threads of every rank
    # take tiles of every round, each tile reduced by whichever claims it.
    options = torch_monarch.Options(threads=2, shm_segment_bytes=512 << 10)
    group = dist.new_group(backend="monarch", pg_options=options)
    numel = (3 << 20) // 4 + 7
    inputs = [torch.randn(numel, generator=torch.Generator().manual_seed(rank)) for rank in range(ctx.world_size)]
    in_rank_order = inputs[0].clone()
    for tensor in inputs[1:]:
        in_rank_order += tensor
    for repeat in range(4):
        tensor = inputs[ctx.rank].clone()
        dist.all_reduce(tensor, group=group)
        wrong = int((tensor != in_rank_order).sum())
        check.true(f"allreduce {repeat} is the rank-order float32 sum, bit for bit", wrong == 0, f"{wrong} elements differ")
    return check.report()


def test_allreduce_sums_in_rank_order_whoever_reduces() -> None:
    """The same bits on every rank and every run: a tile's sum never depends
    on which rank's thread reduced it."""
    assert_all_passed(run_workers_ok(rank_order_worker, 3), min_checks=4)


def block_rounds_worker(ctx: WorkerContext) -> tuple[int, list[str]]:
    check = Checker(ctx.rank)
    ctx.init("monarch")
    n = ctx.world_size
    # Slots of 128 KiB: a 1 MB op takes several rounds, two threads per rank.
    options = torch_monarch.Options(threads=2, shm_segment_bytes=256 << 10)
    group = dist.new_group(backend="monarch", pg_options=options)
    block = (1 << 20) // 4 // n + 3
    for repeat in range(3):
        inputs = [rank_input(rank, n * block, torch.float32, 10 + repeat) for rank in range(n)]
        source = inputs[ctx.rank].clone()
        mine = torch.empty(block)
        dist.reduce_scatter_tensor(mine, source, group=group)
        expected = reference_reduce(inputs, "SUM").view(n, block)[ctx.rank]
        check.close(f"reduce_scatter_tensor {repeat}", mine, expected)
        check.true(f"reduce_scatter_tensor {repeat} left its input alone", torch.equal(source, inputs[ctx.rank]))

        averaged = torch.empty(block)
        dist.reduce_scatter(averaged, list(source.chunk(n)), op=dist.ReduceOp.AVG, group=group)
        check.close(f"reduce_scatter AVG {repeat}", averaged, expected / n)

        gathered = torch.empty(n * block)
        dist.all_gather_into_tensor(gathered, inputs[ctx.rank][:block], group=group)
        check.close(f"all_gather_into_tensor {repeat}", gathered, torch.cat([x[:block] for x in inputs]))
        # As FSDP calls it: the input is this rank's block of the output.
        in_place = torch.zeros(n * block)
        in_place.narrow(0, ctx.rank * block, block).copy_(inputs[ctx.rank][:block])
        dist.all_gather_into_tensor(in_place, in_place.narrow(0, ctx.rank * block, block), group=group)
        check.close(f"in-place all_gather_into_tensor {repeat}", in_place, torch.cat([x[:block] for x in inputs]))
        pieces = [torch.empty(block) for _ in range(n)]
        dist.all_gather(pieces, inputs[ctx.rank][:block], group=group)
        check.close(f"all_gather {repeat}", torch.cat(pieces), torch.cat([x[:block] for x in inputs]))

        tensor = inputs[ctx.rank].clone()
        dist.all_reduce(tensor, group=group)
        check.close(f"all_reduce between {repeat}", tensor, reference_reduce(inputs, "SUM"))

        # AVG divides on the group's threads, bit for bit as torch's div_
        # of the sum.
        for dtype in (torch.float32, torch.bfloat16):
            values = [x.to(dtype) for x in inputs]
            averaged = values[ctx.rank].clone()
            dist.all_reduce(averaged, op=dist.ReduceOp.AVG, group=group)
            check.close(f"{dtype} all_reduce AVG {repeat}", averaged, reference_reduce(values, "AVG"), "AVG")
            summed = values[ctx.rank].clone()
            dist.all_reduce(summed, group=group)
            check.close(f"{dtype} all_reduce AVG {repeat} is the sum's div_", averaged, summed.div_(n))

        root = repeat % n
        tensor = inputs[ctx.rank].clone()
        dist.reduce(tensor, dst=root, group=group)
        want = reference_reduce(inputs, "SUM") if ctx.rank == root else inputs[ctx.rank]
        check.close(f"reduce to {root} {repeat}", tensor, want)

        # Blocks of up to about 2.5 slots' pieces, uneven, some empty: the
        # ranks take the round count from the largest block of any rank.
        splits = [[((src * 7 + dst * 3 + repeat) % 5) * 16_000 for dst in range(n)] for src in range(n)]
        sources = [rank_input(src, sum(splits[src]), torch.float32, 30 + repeat) for src in range(n)]
        got = torch.empty(sum(splits[src][ctx.rank] for src in range(n)))
        dist.all_to_all_single(
            got,
            sources[ctx.rank],
            output_split_sizes=[splits[src][ctx.rank] for src in range(n)],
            input_split_sizes=splits[ctx.rank],
            group=group,
        )
        want = torch.cat([sources[src].split(splits[src])[ctx.rank] for src in range(n)])
        check.close(f"uneven all_to_all_single {repeat}", got, want)

        received = [torch.empty(n * block) for _ in range(n)] if ctx.rank == root else None
        dist.gather(inputs[ctx.rank], gather_list=received, dst=root, group=group)
        if received is not None:
            check.close(f"gather to {root} {repeat}", torch.cat(received), torch.cat(inputs))
        scattered = torch.empty(n * block)
        dist.scatter(scattered, scatter_list=inputs if ctx.rank == root else None, src=root, group=group)
        check.close(f"scatter from {root} {repeat}", scattered, inputs[ctx.rank])
    # Default slots, two threads: rounds of more tiles than a thread takes
    # behind the ones it publishes, so taking and publishing interleave.
    wide = dist.new_group(backend="monarch", pg_options=torch_monarch.Options(threads=2))
    block = (3 << 20) // 4 + 5
    inputs = [rank_input(rank, n * block, torch.float32, 20) for rank in range(n)]
    mine = torch.empty(block)
    dist.reduce_scatter_tensor(mine, inputs[ctx.rank], group=wide)
    check.close("wide reduce_scatter_tensor", mine, reference_reduce(inputs, "SUM").view(n, block)[ctx.rank])
    gathered = torch.empty(n * block)
    dist.all_gather_into_tensor(gathered, inputs[ctx.rank][:block], group=wide)
    check.close("wide all_gather_into_tensor", gathered, torch.cat([x[:block] for x in inputs]))
    check.true("went through shared memory", len(mapped_segments()) >= n, str(mapped_segments()))
    return check.report()


def test_block_collectives_over_many_rounds() -> None:
    assert_all_passed(run_workers_ok(block_rounds_worker, 3), min_checks=46)


# A rank waiting for a late peer sleeps in the kernel: over a 2 s wait it
# used 0.05-0.07 s of CPU on the 2-core development machine, and 0.28 s when
# it yielded and napped 100 us at a time, which took cores from the ranks that
# had work where ranks outnumber cores (the demo, 8 ranks on 2 cores, lost
# 15-25% of its steps).
LATE_PEER_S = 2.0
WAIT_CPU_BOUND_S = 0.15


def late_peer_worker(ctx: WorkerContext) -> float:
    ctx.init("monarch")
    tensor = torch.ones(1024)
    dist.all_reduce(tensor)  # sets the segments up
    if ctx.rank == 1:
        time.sleep(LATE_PEER_S)  # the late peer; synchronises nothing
    cpu_before = time.process_time()
    dist.all_reduce(tensor)
    return time.process_time() - cpu_before


def test_a_rank_waiting_for_a_late_peer_sleeps() -> None:
    waiter_cpu_s = run_workers_ok(late_peer_worker, 2)[0]
    assert waiter_cpu_s < WAIT_CPU_BOUND_S, f"{waiter_cpu_s:.3f} s of CPU waiting {LATE_PEER_S} s for a late peer"


def senders_run_ahead_worker(ctx: WorkerContext) -> tuple[int, list[str]]:
    check = Checker(ctx.rank)
    ctx.init("monarch")
    n = ctx.world_size
    rng = random.Random(ctx.rank)
    empty = torch.empty(0)
    for step in range(300):
        # The root falls behind now and then; a gather's senders and an empty
        # op (announced over the links, waited for by nobody) let the others
        # run two ops ahead, to the stamp the root has yet to read.
        if ctx.rank == 0 and rng.random() < 0.1:
            time.sleep(0.002)
        mine = torch.full((4,), float(ctx.rank + step))
        outputs = [torch.empty(4) for _ in range(n)] if ctx.rank == 0 else None
        dist.gather(mine, gather_list=outputs, dst=0)
        if outputs is not None and not all(torch.equal(outputs[r], torch.full((4,), float(r + step))) for r in range(n)):
            check.true(f"gather {step} is right", False, str(outputs))
        dist.all_reduce(empty)
    check.true("300 gathers between empty ops finish", True)
    return check.report()


def test_senders_running_ahead_of_a_slow_root() -> None:
    assert_all_passed(run_workers_ok(senders_run_ahead_worker, 3), min_checks=1)


def one_allreduce_worker(ctx: WorkerContext) -> tuple[int, list[str]]:
    check = Checker(ctx.rank)
    ctx.init("monarch")
    inputs = [rank_input(rank, NUMEL, torch.float32, 5) for rank in range(ctx.world_size)]
    tensor = inputs[ctx.rank].clone()
    dist.all_reduce(tensor)
    check.close("all_reduce", tensor, reference_reduce(inputs, "SUM"))
    check.true("went through shared memory", len(mapped_segments()) == ctx.world_size, str(mapped_segments()))
    return check.report()


def _plant_segment(pid: int) -> str:
    """A segment file named as if process ``pid`` had created it."""
    name = f"monarch-{pid}-{random.getrandbits(64):016x}-{0:016x}"
    with open(os.path.join(SHM_DIR, name), "wb") as segment:
        segment.write(b"\0" * 4096)
    return name


def test_stale_segment_of_a_dead_process_is_removed() -> None:
    finished = subprocess.Popen(["true"])
    finished.wait()
    stale = _plant_segment(finished.pid)
    live = _plant_segment(os.getpid())
    try:
        assert_all_passed(run_workers_ok(one_allreduce_worker, 2), min_checks=2)
        assert not os.path.exists(os.path.join(SHM_DIR, stale)), "the dead process's segment is still there"
        assert os.path.exists(os.path.join(SHM_DIR, live)), "a live process's segment was removed"
    finally:
        for name in (stale, live):
            if os.path.exists(os.path.join(SHM_DIR, name)):
                os.unlink(os.path.join(SHM_DIR, name))


def fallback_worker(ctx: WorkerContext) -> tuple[int, list[str]]:
    check = Checker(ctx.rank)
    ctx.init("monarch")
    # Rank 1's segment is another size: it cannot map rank 0's, so neither uses one.
    options = torch_monarch.Options(shm_segment_bytes=(8 << 20) if ctx.rank == 0 else (64 << 10))
    group = dist.new_group(backend="monarch", pg_options=options)
    inputs = [rank_input(rank, NUMEL, torch.float32, 7) for rank in range(ctx.world_size)]
    before = _bytes_sent(group)
    for _ in range(2):
        tensor = inputs[ctx.rank].clone()
        dist.all_reduce(tensor, group=group)
        check.close("all_reduce over the links", tensor, reference_reduce(inputs, "SUM"))
    check.true("maps no segment", not mapped_segments(), str(mapped_segments()))
    check.true("payload on the links", _bytes_sent(group) - before >= 4 * NUMEL // 2, str(_bytes_sent(group) - before))
    check.true("no name left in /dev/shm", not names_of(os.getpid()), str(names_of(os.getpid())))
    return check.report()


def test_a_rank_that_cannot_map_makes_all_fall_back() -> None:
    assert_all_passed(run_workers_ok(fallback_worker, 2), min_checks=5)


@pytest.mark.parametrize("op", ["all_reduce", "reduce_scatter"])
def test_kill_during_shared_memory_ops(op: str) -> None:
    # The victim dies in the middle of an op that reads its slots (an
    # allreduce's tiles, a reduce-scatter's blocks).
    assert_killed_and_named(run_workers(kill_worker, 3, "", op, timeout=60))


def stopped_mid_op_worker(ctx: WorkerContext) -> dict[str, Any]:
    ctx.init("monarch", timeout=STUCK_OP_TIMEOUT, pg_options=torch_monarch.Options(shm_segment_bytes=64 << 10))
    victim = ctx.world_size - 1
    ctx.store().set(f"pid{ctx.rank}", str(os.getpid()))
    tensor = torch.ones(NUMEL)
    dist.barrier()
    if ctx.rank == victim:
        # The random delay picks the injection point; it synchronises nothing.
        threading.Timer(random.uniform(0.05, 0.3), os.kill, args=(os.getpid(), signal.SIGSTOP)).start()
    while True:
        outcome = attempt(lambda: dist.all_reduce(tensor))
        if not outcome.ok:
            break
    stopped = int(ctx.store().get(f"pid{victim}"))
    problems = []
    if not outcome.is_a("CollectiveTimeoutError") or outcome.failed_ranks != (victim,):
        problems.append(f"expected CollectiveTimeoutError naming [{victim}], {outcome.describe()}")
    bound = STUCK_OP_TIMEOUT.total_seconds() + TIMEOUT_SLACK_S
    if outcome.elapsed_s > bound:
        problems.append(f"the op ended after {outcome.elapsed_s:.2f} s (bound {bound} s)")
    # The victim dies only once every survivor has its outcome: a survivor
    # still waiting would see a dead peer instead of a stopped one.
    ctx.store().set(f"outcome{ctx.rank}", "1")
    if ctx.rank == 0:
        try:
            ctx.store().wait([f"outcome{rank}" for rank in range(victim)], timedelta(seconds=30))
            wait_until(lambda: process_state(stopped) == "T", 10, f"rank {victim} to be stopped")
        finally:
            kill_and_wait(stopped)
    return {"problems": problems, "elapsed_s": outcome.elapsed_s}


@pytest.mark.parametrize("world", [2, 3])
def test_peer_stopped_mid_op_times_out_naming_it(world: int) -> None:
    # Heartbeats far slower than the op timeout: only the op's deadline ends the wait.
    results = run_workers(stopped_mid_op_worker, world, timeout=60, env={"MONARCH_HEARTBEAT_TIMEOUT": "60"})
    assert results[-1].exit_code == -signal.SIGKILL, results[-1]
    for survivor in results[:-1]:
        assert survivor.ok, survivor
        assert not survivor.value["problems"], survivor.value["problems"]
