"""DistributedDataParallel on CPU over monarch: the same training run over
monarch and over Gloo, from identical init and data, ends with the same
parameters, which also match a local full-batch reference."""

from __future__ import annotations

from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from multiproc import WorkerContext, run_workers_ok
from reference import Checker, assert_all_passed

TIMEOUT = timedelta(seconds=60)
STEPS = 5
BATCH = 16


def _model() -> nn.Module:
    torch.manual_seed(1234)
    # The 256x256 layer (256 KiB) puts one bucket above the small-message
    # threshold, so the chunked ring runs too.
    return nn.Sequential(nn.Linear(32, 256), nn.ReLU(), nn.Linear(256, 256), nn.Tanh(), nn.Linear(256, 4))


def _batch(rank: int, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(step * 1000 + rank)
    return torch.randn(BATCH, 32, generator=generator), torch.randn(BATCH, 4, generator=generator)


def _train(model: nn.Module, batches: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    for inputs, targets in batches:
        optimizer.zero_grad()
        nn.functional.mse_loss(model(inputs), targets).backward()
        optimizer.step()


def ddp_worker(ctx: WorkerContext) -> tuple[int, list[str]]:
    check = Checker(ctx.rank)
    ctx.init("monarch", timeout=TIMEOUT)
    gloo = dist.new_group(backend="gloo")
    world, me = ctx.world_size, ctx.rank
    my_batches = [_batch(me, step) for step in range(STEPS)]
    trained = {}
    for name, group in (("monarch", dist.group.WORLD), ("gloo", gloo)):
        # Small buckets: several allreduces per step, of different sizes.
        model = DistributedDataParallel(_model(), process_group=group, bucket_cap_mb=0.1)
        _train(model, my_batches)
        trained[name] = model.module
    # Local reference: equal per-rank batches, so DDP's averaged gradient is
    # the gradient of the loss over all ranks' batches together.
    reference = _model()
    _train(
        reference,
        [
            (torch.cat([_batch(r, step)[0] for r in range(world)]), torch.cat([_batch(r, step)[1] for r in range(world)]))
            for step in range(STEPS)
        ],
    )
    initial = dict(_model().named_parameters())
    for (name, monarch_param), gloo_param, ref_param in zip(
        trained["monarch"].named_parameters(), trained["gloo"].parameters(), reference.parameters()
    ):
        check.close(f"{name} monarch vs gloo", monarch_param.detach(), gloo_param.detach(), tolerance=(1e-6, 1e-7))
        check.true(f"{name} trained", not torch.equal(monarch_param, initial[name]))
        check.close(f"{name} monarch vs local reference", monarch_param.detach(), ref_param.detach(), tolerance=(1e-4, 1e-5))
    # Replicas agree bit for bit across ranks.
    flat = torch.cat([p.detach().reshape(-1) for p in trained["monarch"].parameters()])
    gathered = [torch.empty_like(flat) for _ in range(world)]
    dist.all_gather(gathered, flat)
    for rank in range(world):
        check.close(f"parameters equal to rank {rank}'s", gathered[rank], flat)
    return check.report()


def test_ddp_matches_gloo_and_reference() -> None:
    assert_all_passed(run_workers_ok(ddp_worker, 2), min_checks=12)
