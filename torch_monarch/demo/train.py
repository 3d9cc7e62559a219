"""The demo's training script: one worker of one replica group.

Launched by ``monarch-run`` (the demo's driver does that), it trains the
tiny language model. By default (``MONARCH_SYNC_MODE=diloco``) the replicas
synchronise with TorchFT's DiLoCo every ``MONARCH_SYNC_EVERY`` (20) steps:
each replica takes inner AdamW steps on its own data (gradients averaged
inside the replica over the "monarch" backend), and every 20 steps the
replicas average their pseudo-gradients over the Manager's
``ProcessGroupMonarch`` and take one outer Nesterov step; a replica that
restarted heals from a donor at that outer sync (model, inner and outer
optimizer, DiLoCo's global weights, scheduler, trainer state).

With ``MONARCH_SYNC_MODE=per-step``, replicas synchronise at every step:

1. ``manager.start_quorum()``: TorchFT asks the Lighthouse for this step's
   quorum (and heals this replica from a donor if it is behind);
2. forward/backward on this worker's batch;
3. gradients are averaged inside the replica over the "monarch" backend
   (``dist.all_reduce``; a failure here is a collective failure of the
   replica: reported, then the replica is restarted in place);
4. and across replicas through ``manager.allreduce`` on the Manager's
   ``ProcessGroupMonarch`` (a failure here only fails the step);
5. ``manager.should_commit()`` decides, per replica, whether to step.

It also works under plain torchrun (``--nproc-per-node 2``) with a
Lighthouse in ``TORCHFT_LIGHTHOUSE``.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any, Optional, Sequence

import torch
import torch.distributed as dist

import torch_monarch  # noqa: F401  (registers the "monarch" backend)
from torch_monarch import supervision
from torch_monarch.demo.config import DemoConfig
from torch_monarch.demo.data import MarkovData
from torch_monarch.demo.model import TinyLM
from torch_monarch.quorum import DiLoCoSync, QuorumConfig, SyncConfig, make_manager
from torch_monarch.quorum.sync import broadcast_replica_state, optimizer_tensors, replica_any
from torch_monarch.supervision.events import Event
from torch_monarch.supervision.states import WorkerState

logger: logging.Logger = logging.getLogger("torch_monarch.demo.train")


def _flat_grads(params: Sequence[torch.Tensor]) -> torch.Tensor:
    return torch.cat(
        [p.grad.reshape(-1) if p.grad is not None else torch.zeros(p.numel(), device=p.device) for p in params]
    )


def _device(cfg: DemoConfig, replica: int) -> torch.device:
    """The CPU, or replica ``replica``'s GPU: the visible GPUs round-robin."""
    if cfg.device == "cpu":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise RuntimeError("the demo's --device cuda needs a GPU that torch can see")
    device = torch.device("cuda", replica % torch.cuda.device_count())
    torch.cuda.set_device(device)
    return device


def _cuda_error_in_step() -> None:
    """The ``cuda`` failure drill: an out-of-range index on the GPU.

    The kernel's bounds check fails on the device; the error is sticky, so
    this process can no longer use the GPU and must be restarted.
    """
    table = torch.zeros(4, device="cuda")
    table[torch.tensor([1 << 30], device="cuda")] += 1.0
    torch.cuda.synchronize()


def _set_grads(params: Sequence[torch.Tensor], flat: torch.Tensor) -> None:
    offset = 0
    for p in params:
        n = p.numel()
        p.grad = flat[offset : offset + n].view_as(p).clone()
        offset += n


class _Loop:
    """The training loop of one worker, per-step or DiLoCo (``MONARCH_SYNC_MODE``)."""

    def __init__(
        self,
        cfg: DemoConfig,
        manager: Any,
        model: TinyLM,
        optimizer: torch.optim.Optimizer,
        scheduler: Any,
        trainer: dict[str, Any],
        replica: int,
        rank: int,
        world: int,
        healed_at: list[int],
        healed_rank: list[bool],
    ) -> None:
        self.cfg, self.manager, self.model = cfg, manager, model
        self.optimizer, self.scheduler, self.trainer = optimizer, scheduler, trainer
        self.replica, self.rank, self.world = replica, rank, world
        self.params = list(model.parameters())
        self.device = self.params[0].device
        self.data = MarkovData(cfg)
        self.healed_at = healed_at
        self.healed_rank = healed_rank  # this rank healed (any step), until the replica's ranks agree again
        self.last_quorum: Optional[int] = None

    def done(self, step: int) -> bool:
        return supervision.stop_requested(step) or (self.cfg.max_steps > 0 and step >= self.cfg.max_steps)

    def _replica_grads(self, batch_step: int) -> tuple[float, torch.Tensor]:
        """Loss of this worker's batch, and the gradients averaged inside the replica (flat)."""
        tokens, targets = (t.to(self.device) for t in self.data.batch(batch_step, self.replica, self.rank))
        loss = self.model.loss(tokens, targets)
        loss.backward()
        flat = _flat_grads(self.params)
        dist.all_reduce(flat)  # inside the replica; raises the backend's typed errors
        flat /= self.world
        return loss.item(), flat

    def _committed(self, committed: bool, loss: float, inner_steps: int, work_kept: bool = False) -> None:
        """Reports one step (per-step) or outer sync (DiLoCo) and whether it committed.

        ``work_kept``: a failed DiLoCo sync that is retried with the interval's weights.
        """
        manager = self.manager
        step = manager.current_step()
        quorum_id = manager._quorum_id  # TorchFT has no public accessor
        participants = manager.num_participants()
        if committed:
            self.trainer["samples"] += self.cfg.batch_size * self.world * participants * inner_steps
        supervision.report_progress(
            step, quorum_id=quorum_id, participants=participants, loss=round(loss, 4), committed=committed
        )
        if self.rank != 0:
            return
        if quorum_id != self.last_quorum:
            supervision.worker.event(Event.QUORUM, quorum_id=quorum_id, participants=participants, step=step)
            self.last_quorum = quorum_id
        if not committed:
            supervision.worker.event(
                Event.SYNC_FAILED, step=step, quorum_id=quorum_id, participants=participants, work_kept=work_kept
            )
            return
        # A sync that healed this replica: its loss was of weights the heal replaced, so none is recorded.
        fields = {} if self.healed_at else {"loss": loss}
        supervision.record_step(step, quorum_id=quorum_id, participants=participants, **fields)
        if self.healed_at:
            self.healed_at.clear()
            supervision.worker.event(Event.REJOINED, step=step, quorum_id=quorum_id, participants=participants)

    def per_step(self) -> None:
        """Quorum, gradients averaged across replicas and a commit decision at every step."""
        manager = self.manager
        while not self.done(manager.current_step()):
            before = manager.current_step()
            manager.start_quorum()
            loss, flat = self._replica_grads(before)
            # Waiting for the quorum or for other replicas is not a hang of this
            # worker: the hang probe's progress timeout only covers "training".
            supervision.report_progress(before, state=WorkerState.SYNCING)
            manager.allreduce(flat).wait()  # across replicas; errors only fail this step
            _set_grads(self.params, flat)
            committed = manager.should_commit()
            if committed:
                self.optimizer.step()
                self.scheduler.step()
            self.optimizer.zero_grad(set_to_none=True)
            # TorchFT heals each rank from its own donor and, at step 0, gives
            # each group rank its own primary: the ranks of a replica can end
            # up with different weights (sync.DiLoCoSync._after_sync says more).
            healed = bool(self.healed_rank)
            self.healed_rank.clear()
            if replica_any([healed])[0]:
                broadcast_replica_state([p.data for p in self.params] + optimizer_tensors(self.optimizer, self.params))
            self._committed(committed, loss, 1)

    def diloco(self, diloco: DiLoCoSync) -> None:
        """Inner steps inside the replica; every ``every`` of them DiLoCo's outer sync."""
        manager = self.manager
        every = diloco.config.every
        losses: list[float] = []
        # Stop only between outer syncs, so that every replica ends on the same one.
        while not (diloco.inner_step == 0 and self.done(manager.current_step())):
            outer = manager.current_step()
            loss, flat = self._replica_grads(outer * every + diloco.inner_step)
            _set_grads(self.params, flat)
            losses.append(loss)
            if diloco.syncs_next:
                supervision.report_progress(outer, state=WorkerState.SYNCING)
            result = diloco.step()
            self.scheduler.step()
            self.optimizer.zero_grad(set_to_none=True)
            if result is None:
                supervision.report_progress(outer, loss=round(losses[-1], 4))
                continue
            self._committed(result.committed, sum(losses) / len(losses), len(losses), result.work_kept)
            if result.committed or not result.work_kept:
                losses.clear()


@supervision.supervised
def main() -> None:
    logging.basicConfig(level=os.environ.get("MONARCH_DEMO_LOG_LEVEL", "WARNING"))
    torch.set_num_threads(1)
    cfg = DemoConfig().with_env_overrides()
    ctx = supervision.worker_context()
    replica = int(ctx.replica_id)

    # Within the replica: the monarch backend (env:// from the elastic agent).
    dist.init_process_group(cfg.backend, timeout=cfg.pg_timeout)
    rank, world = dist.get_rank(), dist.get_world_size()
    supervision.worker.event(Event.GROUP_READY)

    device = _device(cfg, replica)
    if device.type == "cuda":
        supervision.register_drill("cuda", _cuda_error_in_step)
    torch.manual_seed(cfg.init_seed)
    model = TinyLM(cfg).to(device)
    params = [p for p in model.parameters()]
    optimizer = torch.optim.AdamW(params, lr=cfg.lr)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / cfg.warmup_steps))
    trainer: dict[str, Any] = {"samples": 0}

    def state_dict() -> dict[str, Any]:
        return {
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict(),
            "trainer": dict(trainer),
        }

    healed_at: list[int] = []
    healed_rank: list[bool] = []

    def load_state_dict(state: dict[str, Any]) -> None:
        # Called by the Manager when this replica heals from a donor.
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        trainer.update(state["trainer"])
        healed_rank[:] = [True]
        step = manager.current_step()
        if step > 0 and rank == 0:  # step 0: the initial sync at job start
            healed_at.append(step)
            supervision.worker.event(Event.HEALED, step=step, quorum_id=manager._quorum_id)

    # Across replicas: TorchFT's Manager with ProcessGroupMonarch. DiLoCo
    # heals at the start of an outer sync, so it needs a synchronous quorum.
    sync = SyncConfig().with_env_overrides()
    manager = make_manager(
        state_dict=state_dict,
        load_state_dict=load_state_dict,
        replica_id=f"replica_{replica}",
        config=QuorumConfig(min_replica_size=1).with_env_overrides(),
        use_async_quorum=sync.mode == "per-step",
    )
    supervision.worker.event(Event.MANAGER_READY, sync=sync.mode, sync_every=sync.every)
    supervision.wait_for_start()  # the demo starts all replicas together
    supervision.report_progress(manager.current_step(), state=WorkerState.TRAINING)
    loop = _Loop(cfg, manager, model, optimizer, scheduler, trainer, replica, rank, world, healed_at, healed_rank)
    if sync.mode == "diloco":
        with DiLoCoSync(manager, model, optimizer, sync) as diloco:
            loop.diloco(diloco)
    else:
        loop.per_step()

    if ctx.run_dir is not None:  # every rank: the job's ranks must all agree, not only rank 0 of each replica
        final = ctx.run_dir.root / "final"
        final.mkdir(parents=True, exist_ok=True)
        torch.save(
            {
                "step": manager.current_step(),
                "model": {name: value.cpu() for name, value in model.state_dict().items()},
                "replica": replica,
                "rank": rank,
                "t": time.time(),
            },
            final / f"replica_{replica}_rank_{rank}.pt",
        )
    supervision.report_progress(manager.current_step(), state=WorkerState.DONE)
    manager.shutdown(wait=False)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
