"""A supervised DiLoCo trainer for the DiLoCo fault tests (``monarch-run ... diloco_steps.py``).

Each replica trains a small model with inner Adam steps on its own data and
TorchFT's DiLoCo (``torch_monarch.quorum.DiLoCoSync``, ``MONARCH_SYNC_*``)
until ``--outer-steps`` outer syncs have committed. ``--kill inner`` makes
replica ``--kill-replica`` SIGKILL itself at inner step 2 after outer step
``--kill-at``; ``--kill sync`` makes it SIGKILL itself inside that outer
sync, after it sent the first of its pseudo-gradient allreduces. Only the
first incarnation dies.

Rank 0 of every replica appends one line per outer sync to
``<run dir>/diloco_<replica>.jsonl``: step, committed, whether this
incarnation had just healed, and digests of the model, DiLoCo's global
weights, the inner and the outer optimizer's state. At the end it saves the
parameters to ``<run dir>/final/replica_<replica>.pt``.
"""

import argparse
import hashlib
import json
import os
import signal
from datetime import timedelta
from typing import Any, Iterable

import torch
import torch.distributed as dist
from torch import nn

import torch_monarch  # noqa: F401
from torch_monarch import supervision
from torch_monarch.quorum import DiLoCoSync, QuorumConfig, SyncConfig, make_manager


def digest(tensors: Iterable[torch.Tensor]) -> str:
    h = hashlib.sha256()
    for t in tensors:
        h.update(t.detach().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def optimizer_digest(optimizer: torch.optim.Optimizer) -> str:
    state = optimizer.state_dict()["state"]
    return digest(v for i in sorted(state) for _, v in sorted(state[i].items()) if isinstance(v, torch.Tensor))


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


@supervision.supervised
def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--outer-steps", type=int, default=6)
    parser.add_argument("--kill", choices=["", "inner", "sync"], default="")
    parser.add_argument("--kill-replica", default="1")
    parser.add_argument("--kill-at", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(1)
    ctx = supervision.worker_context()
    dist.init_process_group("monarch")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))
    inner = torch.optim.Adam(model.parameters(), lr=0.01)
    healed: list[int] = []

    def load_state_dict(state: dict[str, Any]) -> None:
        model.load_state_dict(state["model"])
        inner.load_state_dict(state["inner"])
        healed.append(manager.current_step())

    manager = make_manager(
        state_dict=lambda: {"model": model.state_dict(), "inner": inner.state_dict()},
        load_state_dict=load_state_dict,
        replica_id=f"diloco_{ctx.replica_id}",
        config=QuorumConfig(min_replica_size=2, timeout=timedelta(seconds=10)).with_env_overrides(),
        use_async_quorum=False,
    )
    sync = SyncConfig().with_env_overrides()
    victim = args.kill and ctx.replica_id == args.kill_replica and ctx.restart_count == 0
    if victim and args.kill == "sync":
        allreduce = manager.allreduce

        def allreduce_then_die(tensor: torch.Tensor, *a: Any, **kw: Any) -> Any:
            work = allreduce(tensor, *a, **kw)
            if manager.current_step() == args.kill_at:
                supervision.worker.event("dying", where="outer sync", step=args.kill_at)
                die()
            return work

        manager.allreduce = allreduce_then_die  # type: ignore[method-assign]
    log = ctx.run_dir.root / f"diloco_{ctx.replica_id}.jsonl" if ctx.run_dir is not None else None
    with DiLoCoSync(manager, model, inner, sync) as diloco:
        while not (diloco.inner_step == 0 and manager.current_step() >= args.outer_steps):
            step = manager.current_step()
            if victim and args.kill == "inner" and step == args.kill_at and diloco.inner_step == 2:
                supervision.worker.event("dying", where="inner step", step=step)
                die()
            g = torch.Generator().manual_seed((step * sync.every + diloco.inner_step) * 100 + int(ctx.replica_id))
            x = torch.randn(16, 8, generator=g)
            loss = (model(x) - x.sum(dim=1, keepdim=True).sin()).pow(2).mean()
            inner.zero_grad(set_to_none=True)
            loss.backward()
            for p in model.parameters():  # average inside the replica
                dist.all_reduce(p.grad)
                p.grad /= world
            supervision.report_progress(step, state="syncing" if diloco.syncs_next else "training")
            result = diloco.step()
            if result is None or rank != 0 or log is None:
                continue
            record = {
                "step": manager.current_step(),
                "committed": result.committed,
                "work_kept": result.work_kept,
                "attempt": ctx.restart_count,
                "healed": bool(healed),
                "participants": manager.num_participants(),
                "model": digest(model.parameters()),
                "global": digest(diloco.global_parameters().values()),
                "inner": optimizer_digest(inner),
                "outer": optimizer_digest(diloco.outer_optimizer),
            }
            healed.clear()
            with open(log, "a") as f:
                f.write(json.dumps(record) + "\n")
    if rank == 0 and ctx.run_dir is not None:
        final = ctx.run_dir.root / "final"
        final.mkdir(parents=True, exist_ok=True)
        torch.save([p.detach() for p in model.parameters()], final / f"replica_{ctx.replica_id}.pt")
    supervision.report_progress(manager.current_step(), state="done")
    manager.shutdown(wait=False)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
