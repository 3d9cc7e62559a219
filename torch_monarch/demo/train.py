"""The demo's training script: one worker of one replica group.

Launched by ``monarch-run`` (the demo's driver does that), it trains the
tiny language model with per-step synchronisation:

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
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

import torch_monarch  # noqa: F401  (registers the "monarch" backend)
from torch_monarch import supervision
from torch_monarch.demo.config import DemoConfig
from torch_monarch.demo.data import MarkovData
from torch_monarch.demo.model import TinyLM
from torch_monarch.quorum import QuorumConfig, make_manager

logger: logging.Logger = logging.getLogger("torch_monarch.demo.train")


def _flat_grads(params: list[torch.Tensor]) -> torch.Tensor:
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


def _set_grads(params: list[torch.Tensor], flat: torch.Tensor) -> None:
    offset = 0
    for p in params:
        n = p.numel()
        p.grad = flat[offset : offset + n].view_as(p).clone()
        offset += n


@supervision.supervised
def main() -> None:
    logging.basicConfig(level=os.environ.get("MONARCH_DEMO_LOG_LEVEL", "WARNING"))
    torch.set_num_threads(1)
    cfg = DemoConfig().with_env_overrides()
    ctx = supervision.worker_context()
    replica = int(ctx.replica_id)

    # Within the replica: the monarch backend (env:// from the elastic agent).
    dist.init_process_group(cfg.backend, timeout=timedelta(seconds=cfg.pg_timeout_s))
    rank, world = dist.get_rank(), dist.get_world_size()
    supervision.worker.event("group_ready")

    device = _device(cfg, replica)
    if device.type == "cuda":
        supervision.register_drill("cuda", _cuda_error_in_step)
    torch.manual_seed(cfg.init_seed)
    model = TinyLM(cfg).to(device)
    params = [p for p in model.parameters()]
    optimizer = torch.optim.AdamW(params, lr=cfg.lr)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / cfg.warmup_steps))
    trainer: dict[str, Any] = {"samples": 0}
    data = MarkovData(cfg)

    def state_dict() -> dict[str, Any]:
        return {
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict(),
            "trainer": dict(trainer),
        }

    healed_at: list[int] = []

    def load_state_dict(state: dict[str, Any]) -> None:
        # Called by the Manager when this replica heals from a donor.
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        trainer.update(state["trainer"])
        step = manager.current_step()
        if step > 0 and rank == 0:  # step 0: the initial sync at job start
            healed_at.append(step)
            supervision.worker.event("healed", step=step, quorum_id=manager._quorum_id)

    # Across replicas: TorchFT's Manager with ProcessGroupMonarch.
    manager = make_manager(
        state_dict=state_dict,
        load_state_dict=load_state_dict,
        replica_id=f"replica_{replica}",
        config=QuorumConfig(min_replica_size=1).with_env_overrides(),
    )
    supervision.worker.event("manager_ready")
    supervision.wait_for_start()  # the demo starts all replicas together
    last_quorum = None
    supervision.report_progress(manager.current_step(), state="training")

    def done(step: int) -> bool:
        return supervision.stop_requested(step) or (cfg.max_steps > 0 and step >= cfg.max_steps)

    while not done(manager.current_step()):
        before = manager.current_step()
        manager.start_quorum()
        tokens, targets = (t.to(device) for t in data.batch(before, replica, rank))
        loss = model.loss(tokens, targets)
        loss.backward()

        flat = _flat_grads(params)
        dist.all_reduce(flat)  # inside the replica; raises the backend's typed errors
        flat /= world
        # Waiting for the quorum or for other replicas is not a hang of this
        # worker: the hang probe's progress timeout only covers "training".
        supervision.report_progress(before, state="syncing")
        manager.allreduce(flat).wait()  # across replicas; errors only fail this step
        _set_grads(params, flat)

        committed = manager.should_commit()
        if committed:
            optimizer.step()
            scheduler.step()
            trainer["samples"] += cfg.batch_size * world * manager.num_participants()
        optimizer.zero_grad(set_to_none=True)

        step = manager.current_step()
        quorum_id = manager._quorum_id  # TorchFT has no public accessor
        participants = manager.num_participants()
        supervision.report_progress(
            step, quorum_id=quorum_id, participants=participants, loss=round(loss.item(), 4), committed=committed
        )
        if rank != 0:
            continue
        if quorum_id != last_quorum:
            supervision.worker.event("quorum", quorum_id=quorum_id, participants=participants, step=step)
            last_quorum = quorum_id
        if committed:
            supervision.record_step(step, loss=loss.item(), quorum_id=quorum_id, participants=participants)
            if healed_at:
                healed_at.clear()
                supervision.worker.event("rejoined", step=step, quorum_id=quorum_id, participants=participants)

    if rank == 0 and ctx.run_dir is not None:
        final = ctx.run_dir.root / "final"
        final.mkdir(parents=True, exist_ok=True)
        torch.save(
            {
                "step": manager.current_step(),
                "model": {name: value.cpu() for name, value in model.state_dict().items()},
                "replica": replica,
                "t": time.time(),
            },
            final / f"replica_{replica}.pt",
        )
    supervision.report_progress(manager.current_step(), state="done")
    manager.shutdown(wait=False)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
