"""ProcessGroupMonarch under TorchFT's training wrappers, healthy path: two
replica groups (threads of this process, as in TorchFT's own integration
tests) train with torchft's DistributedDataParallel + OptimizerWrapper, and
with LocalSGD; at the end both replicas hold the same parameters."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any, Callable

import pytest
import torch
import torch.distributed as dist
from torch import nn, optim
from torchft.coordination import LighthouseServer
from torchft.ddp import DistributedDataParallel
from torchft.local_sgd import LocalSGD
from torchft.manager import Manager
from torchft.optim import OptimizerWrapper

from torch_monarch.torchft import ProcessGroupMonarch

pytestmark = [pytest.mark.timeout(90), pytest.mark.newest_stack]

STEPS = 4


def _model() -> nn.Module:
    return nn.Sequential(nn.Linear(3, 8), nn.ReLU(), nn.Linear(8, 4))


def _manager(replica: int, lighthouse: str, model: nn.Module, inner: optim.Optimizer) -> tuple[Manager, Any]:
    """The replica group's Manager, and its store (which must outlive it)."""
    store = dist.TCPStore("localhost", 0, is_master=True, wait_for_workers=False)

    def load_state_dict(state: dict[str, Any]) -> None:
        model.load_state_dict(state["model"])
        inner.load_state_dict(state["optim"])

    manager = Manager(
        pg=ProcessGroupMonarch(timeout=timedelta(seconds=10)),
        min_replica_size=2,
        load_state_dict=load_state_dict,
        state_dict=lambda: {"model": model.state_dict(), "optim": inner.state_dict()},
        replica_id=f"train_{replica}",
        store_addr="localhost",
        store_port=store.port,
        rank=0,
        world_size=1,
        lighthouse_addr=lighthouse,
        timeout=timedelta(seconds=10),
    )
    return manager, store


def _ddp_replica(replica: int, lighthouse: str) -> list[torch.Tensor]:
    torch.manual_seed(replica)  # different initial weights: the Manager syncs them at step 0
    model = _model()
    inner = optim.Adam(model.parameters(), lr=0.01)
    manager, _store = _manager(replica, lighthouse, model, inner)
    try:
        ddp = DistributedDataParallel(manager, model)
        optimizer = OptimizerWrapper(manager, inner)
        data = torch.Generator().manual_seed(100 + replica)
        while manager.current_step() < STEPS:
            optimizer.zero_grad()
            ddp(torch.rand(4, 3, generator=data)).pow(2).mean().backward()
            optimizer.step()
        return [p.detach().clone() for p in model.parameters()]
    finally:
        manager.shutdown(wait=False)


def _local_sgd_replica(replica: int, lighthouse: str) -> list[torch.Tensor]:
    torch.manual_seed(0)
    model = _model()
    inner = optim.SGD(model.parameters(), lr=0.05)
    manager, _store = _manager(replica, lighthouse, model, inner)
    try:
        data = torch.Generator().manual_seed(100 + replica)
        with LocalSGD(manager, model, inner, sync_every=2):
            while manager.current_step() < STEPS // 2:
                inner.zero_grad()
                model(torch.rand(4, 3, generator=data)).pow(2).mean().backward()
                inner.step()
        return [p.detach().clone() for p in model.parameters()]
    finally:
        manager.shutdown(wait=False)


@pytest.mark.parametrize("loop", [_ddp_replica, _local_sgd_replica], ids=["ddp", "local_sgd"])
def test_two_replicas_end_identical(loop: Callable[[int, str], list[torch.Tensor]]) -> None:
    lighthouse = LighthouseServer(bind="[::]:0", min_replicas=2)
    try:
        with ThreadPoolExecutor(max_workers=2) as pool:
            futures = [pool.submit(loop, replica, lighthouse.address()) for replica in range(2)]
            params = [future.result(timeout=60) for future in futures]
    finally:
        lighthouse.shutdown()
    for mine, theirs in zip(params[0], params[1]):
        torch.testing.assert_close(mine, theirs, rtol=0, atol=0)
    torch.manual_seed(0)
    assert not torch.equal(params[0][0], _model()[0].weight), "training did not change the weights"
