"""FSDP2 (``fully_shard``) on CPU over the monarch backend: parameters are
sharded across the ranks, gradients reduce-scattered and parameters
all-gathered by monarch, and training matches one process training the same
model on the whole batch, also with its communication buffers allocated by
the group (``set_allocate_memory_from_process_group_for_comm``), whose
collectives then read and write them in place (test_pooled_tensors.py).
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

import torch_monarch
from multiproc import WorkerContext, run_workers_ok
from reference import Checker, assert_all_passed

STEPS = 3
BATCH = 8


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))


def _batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(100 + step)
    return torch.randn(BATCH, 16, generator=generator), torch.randn(BATCH, 4, generator=generator)


def fsdp_worker(ctx: WorkerContext, pooled: bool) -> tuple[int, list[str]]:
    check = Checker(ctx.rank)
    ctx.init("monarch")
    world = ctx.world_size
    mesh = init_device_mesh("cpu", (world,))
    sharded = _model()
    for layer in sharded:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(sharded, mesh=mesh)
    for module in sharded.modules():
        if isinstance(module, torch.distributed.fsdp.FSDPModule):
            module.set_allocate_memory_from_process_group_for_comm(pooled)
    direct_before = torch_monarch._C.direct_ops()
    reference = _model()
    optimizers = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (sharded, reference)]
    share = BATCH // world
    for step in range(STEPS):
        inputs, targets = _batch(step)
        mine = slice(ctx.rank * share, (ctx.rank + 1) * share)
        torch.nn.functional.mse_loss(sharded(inputs[mine]), targets[mine]).backward()
        torch.nn.functional.mse_loss(reference(inputs), targets).backward()
        for optimizer in optimizers:
            optimizer.step()
            optimizer.zero_grad()
    for (name, param), expected in zip(sharded.named_parameters(), reference.parameters()):
        check.true(f"{name} is sharded", param.to_local().numel() < expected.numel())
        check.close(f"{name} after {STEPS} steps", param.full_tensor(), expected.detach(), tolerance=(1e-5, 1e-6))
    in_place = torch_monarch._C.direct_ops() - direct_before
    # Each step all-gathers every layer's parameters and reduce-scatters its gradients.
    check.true("pooled buffers ran in place" if pooled else "ordinary buffers copied", (in_place > 0) == pooled, str(in_place))
    return check.report()


@pytest.mark.parametrize("pooled", [False, True])
def test_fully_shard_trains_like_one_process(pooled: bool) -> None:
    assert_all_passed(run_workers_ok(fsdp_worker, 2, pooled), min_checks=9)
