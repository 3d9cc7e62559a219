"""Async ops: Work.wait, is_completed (never blocking), exception, and
get_future whose value is the op's output tensors."""

from __future__ import annotations

from datetime import timedelta
from typing import Callable

import torch
import torch.distributed as dist

from multiproc import WorkerContext, run_workers_ok
from reference import Checker, assert_all_passed, rank_input, reference_reduce

TIMEOUT = timedelta(seconds=60)


def _future_tensors(work: dist.Work) -> list[torch.Tensor]:
    value = work.get_future().wait()
    return list(value) if isinstance(value, (list, tuple)) else [value]


def async_worker(ctx: WorkerContext) -> tuple[int, list[str]]:
    check = Checker(ctx.rank)
    ctx.init("monarch", timeout=TIMEOUT)
    world, me = ctx.world_size, ctx.rank
    inputs = [rank_input(rank, 5000, torch.float32, 1) for rank in range(world)]

    # Several ops in flight at once, completed in order.
    tensor = inputs[me].clone()
    gathered = [torch.empty(5000) for _ in range(world)]
    flat = torch.empty(world * 5000)
    received = inputs[0].clone() if me == 0 else torch.empty(5000)
    works: dict[str, dist.Work] = {
        "all_reduce": dist.all_reduce(tensor, async_op=True),
        "all_gather": dist.all_gather(gathered, inputs[me], async_op=True),
        "all_gather_into_tensor": dist.all_gather_into_tensor(flat, inputs[me], async_op=True),
        "broadcast": dist.broadcast(received, src=0, async_op=True),
        "barrier": dist.barrier(async_op=True),
    }
    for name, work in works.items():
        check.true(f"{name} wait", work.wait() is True)
        check.true(f"{name} is_completed after wait", work.is_completed())
        check.true(f"{name} is_success", work.is_success())
        check.true(f"{name} exception None", work.exception() is None, repr(work.exception()))
    expected_sum = reference_reduce(inputs, "SUM")
    check.close("all_reduce result", tensor, expected_sum)
    check.close("all_reduce future value", _future_tensors(works["all_reduce"])[0], expected_sum)
    check.true("all_reduce future value is the output tensor", _future_tensors(works["all_reduce"])[0].data_ptr() == tensor.data_ptr())
    future_gathered = _future_tensors(works["all_gather"])
    check.true("all_gather future has one tensor per rank", len(future_gathered) == world, str(len(future_gathered)))
    for rank in range(world):
        check.close(f"all_gather future value {rank}", future_gathered[rank], inputs[rank])
    check.close("all_gather_into_tensor future value", _future_tensors(works["all_gather_into_tensor"])[0], torch.cat(inputs))
    check.close("broadcast result", received, inputs[0])

    # get_future().then chains on completion.
    tensor = inputs[me].clone()
    work = dist.all_reduce(tensor, op=dist.ReduceOp.MAX, async_op=True)
    doubled = work.get_future().then(lambda fut: fut.value()[0] * 2).wait()
    check.close("future then", doubled, reference_reduce(inputs, "MAX") * 2)

    # is_completed does not block: an op whose peers have not joined yet is
    # pending. Rank 0 starts it, checks, then lets the others join.
    store = ctx.store()
    tensor = torch.ones(10)
    if me == 0:
        work = dist.all_reduce(tensor, async_op=True)
        check.true("pending collective not completed", not work.is_completed())
        store.set("collective_started", "1")
        work.wait()
    else:
        store.wait(["collective_started"])
        work = dist.all_reduce(tensor, async_op=True)
        work.wait()
    check.true("collective completed", work.is_completed())
    check.close("collective value", tensor, torch.full((10,), float(world)))

    # Same for a receive posted before its send.
    if me == 1:
        buffer = torch.empty(3)
        work = dist.irecv(buffer, src=0, tag=3)
        check.true("pending recv not completed", not work.is_completed())
        store.set("recv_posted", "1")
        work.wait()
        check.true("recv completed", work.is_completed())
        check.close("recv value", buffer, torch.tensor([1.0, 2.0, 3.0]))
        check.close("recv future value", _future_tensors(work)[0], torch.tensor([1.0, 2.0, 3.0]))
    elif me == 0:
        store.wait(["recv_posted"])
        dist.send(torch.tensor([1.0, 2.0, 3.0]), dst=1, tag=3)
    dist.barrier()
    return check.report()


def test_async_work_and_futures() -> None:
    assert_all_passed(run_workers_ok(async_worker, 3), min_checks=20)


def _ops(me: int, world: int) -> dict[str, Callable[[], dist.Work]]:
    """One async call per collective, for wait_many_worker."""
    tensor = torch.ones(4)
    return {
        "reduce": lambda: dist.reduce(tensor.clone(), dst=0, async_op=True),
        "reduce_scatter_tensor": lambda: dist.reduce_scatter_tensor(torch.empty(2), torch.ones(2 * world), async_op=True),
        "all_to_all_single": lambda: dist.all_to_all_single(torch.empty(world), torch.ones(world), async_op=True),
        "gather": lambda: dist.gather(tensor, [torch.empty(4) for _ in range(world)] if me == 0 else None, dst=0, async_op=True),
        "scatter": lambda: dist.scatter(torch.empty(4), [torch.ones(4)] * world if me == 0 else None, src=0, async_op=True),
    }


def many_async_worker(ctx: WorkerContext) -> tuple[int, list[str]]:
    """Every collective returns a Work that completes successfully."""
    check = Checker(ctx.rank)
    ctx.init("monarch", timeout=TIMEOUT)
    works = {name: call() for name, call in _ops(ctx.rank, ctx.world_size).items()}
    for name, work in reversed(list(works.items())):
        work.wait()
        check.true(f"{name} completed", work.is_completed() and work.exception() is None)
        check.true(f"{name} future done", work.get_future().done())
    return check.report()


def test_every_collective_async() -> None:
    assert_all_passed(run_workers_ok(many_async_worker, 2), min_checks=10)
