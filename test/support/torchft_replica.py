"""A TorchFT replica group for integration tests: one process that trains a
small model with ``torchft.Manager`` over a ``ProcessGroupMonarch`` (or a
native monarch group, ``ReplicaConfig.native``), heals
through TorchFT's ``PGTransport`` (tagged send/recv on the same group), and
talks to the parent over its own pipe (never a shared queue or lock, which
a SIGKILLed process could leave held).

Events sent to the parent (all times are ``time.monotonic()``, the same
clock in every process):

* ``("ready", replica, life, pid)``: the Manager is up; waits for "start".
* ``("step", replica, life, step, committed, t)``: after each optimizer step.
* ``("done", replica, life, step, params)``: stopped at ``stop_step``.
* ``("error", replica, life, traceback)``: the loop raised.

Messages from the parent: "start" (take the first step) and "gate" (go on
past ``gate_step``).
"""

from __future__ import annotations

import logging
import os
import time
import traceback
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

__all__ = ["ReplicaConfig", "average_gradients", "replica_main"]


@dataclass(frozen=True)
class ReplicaConfig:
    lighthouse: str
    stop_step: int
    # Replicas wait at this step for the parent's "gate" (sent once the
    # restarted replica is up), so that survivors cannot finish without it.
    gate_step: int
    pg_timeout: timedelta = timedelta(seconds=10)
    heartbeat_timeout: timedelta = timedelta(seconds=3)
    # The Manager's group: a ProcessGroupMonarch, or (torch >= 2.14) a native
    # monarch group made with enable_reconfigure=True, with no wrapper.
    native: bool = False


def replica_main(replica: int, life: int, config: ReplicaConfig, conn: Any) -> None:
    """Runs one replica group of world size 1 until ``config.stop_step``."""
    try:
        _train(replica, life, config, conn)
    except BaseException:  # noqa: BLE001 - reported to the parent
        conn.send(("error", replica, life, traceback.format_exc()))
        raise


def average_gradients(manager: Any, model: Any) -> None:
    """Averages the gradients over the quorum through the Manager.

    Not torchft.ddp.DistributedDataParallel: in torchft 0.2.0 its comm hook
    asserts (``assert fut._fut``) when the allreduce's ``wait()`` raises, i.e.
    when a peer dies during the step, whatever the process group. The
    Manager's own work catches the error, marks the step failed and lets
    should_commit() say no, which is what this test is about.
    """
    works = [manager.allreduce(p.grad) for p in model.parameters() if p.grad is not None]
    for work in works:
        work.wait()


class _ParentMessages:
    """The messages the parent has sent so far."""

    def __init__(self, conn: Any) -> None:
        self._conn = conn
        self._seen: set[str] = set()

    def wait(self, message: str, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while message not in self._seen:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not self._conn.poll(remaining):
                raise TimeoutError(f"the parent never sent {message!r}")
            self._seen.add(self._conn.recv())


def _train(replica: int, life: int, config: ReplicaConfig, conn: Any) -> None:
    logging.basicConfig(level=logging.WARNING)
    import torch
    import torch.distributed as dist
    from torch import nn, optim
    from torchft.checkpointing.pg_transport import PGTransport
    from torchft.manager import Manager
    from torchft.optim import OptimizerWrapper

    from torch_monarch.options import Options
    from torch_monarch.torchft import ProcessGroupMonarch

    torch.set_num_threads(1)
    timeout = config.pg_timeout
    store = dist.TCPStore("localhost", 0, is_master=True, wait_for_workers=False)
    options = Options(heartbeat_timeout=config.heartbeat_timeout)
    if config.native:
        # The replicas of one TorchFT job name it by their Lighthouse: the
        # group accepts the other replicas' handles for that.
        os.environ["TORCHFT_LIGHTHOUSE"] = config.lighthouse
        dist.init_process_group(
            "monarch",
            store=dist.PrefixStore("native", store),
            rank=0,
            world_size=1,
            timeout=timeout,
            pg_options=options,
            enable_reconfigure=True,
        )
        pg = dist.group.WORLD
    else:
        pg = ProcessGroupMonarch(timeout=timeout, options=options)

    torch.manual_seed(42)  # same initial weights everywhere; the Manager syncs them anyway
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    inner = optim.Adam(model.parameters(), lr=0.01)

    def state_dict() -> dict[str, Any]:
        return {"model": model.state_dict(), "optim": inner.state_dict()}

    def load_state_dict(state: dict[str, Any]) -> None:
        model.load_state_dict(state["model"])
        inner.load_state_dict(state["optim"])

    manager = Manager(
        pg=pg,
        min_replica_size=2,
        load_state_dict=load_state_dict,
        state_dict=state_dict,
        replica_id=f"replica_{replica}",
        store_addr="localhost",
        store_port=store.port,
        rank=0,
        world_size=1,
        lighthouse_addr=config.lighthouse,
        timeout=timeout,
        quorum_timeout=timedelta(seconds=30),
        connect_timeout=timedelta(seconds=30),
        checkpoint_transport=PGTransport(pg, timeout=timeout, device=torch.device("cpu")),
    )
    try:
        optimizer = OptimizerWrapper(manager, inner)
        # Each replica (and life) sees different data; gradients are averaged.
        data = torch.Generator().manual_seed(1000 * replica + life)
        parent = _ParentMessages(conn)
        conn.send(("ready", replica, life, os.getpid()))
        parent.wait("start")
        while manager.current_step() < config.stop_step:
            if manager.current_step() >= config.gate_step:
                parent.wait("gate")
            before = manager.current_step()
            optimizer.zero_grad()
            inputs = torch.rand(16, 8, generator=data)
            loss = model(inputs).pow(2).mean()
            loss.backward()
            average_gradients(manager, model)
            optimizer.step()
            step = manager.current_step()
            conn.send(("step", replica, life, step, step > before, time.monotonic()))
        # Plain lists: tensors sent through a pipe would go as shared-memory
        # handles that die with this process.
        params = [p.detach().tolist() for p in model.parameters()]
        conn.send(("done", replica, life, manager.current_step(), params))
    finally:
        manager.shutdown(wait=False)
        if config.native:
            dist.destroy_process_group()
        else:
            pg.shutdown()
