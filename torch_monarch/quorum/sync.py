"""How replicas synchronise: every step (FT-DDP), or TorchFT's DiLoCo every N steps.

``monarch-run --sync diloco --sync-every 20`` (the default) or
``--sync per-step`` tells a training script which to use, through
``MONARCH_SYNC_MODE`` / ``MONARCH_SYNC_EVERY``; the script reads them with
``SyncConfig().with_env_overrides()``.

With DiLoCo, :class:`DiLoCoSync` wraps ``torchft.local_sgd.DiLoCo``: the
inner optimizer steps locally, and every ``every`` inner steps the replicas
average their pseudo-gradients (global weights minus local weights) over the
Manager's process group and step an outer optimizer (SGD with Nesterov
momentum, as in the DiLoCo paper). TorchFT registers the outer optimizer and
the global (backup) weights with the Manager, so a replica that heals from a
donor gets them along with the script's own state (model, inner optimizer).
After every outer sync the replica's ranks take rank 0's state
(:meth:`DiLoCoSync._after_sync` says why).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any, Optional, Sequence, Type

from torch_monarch._env import with_env_overrides

if TYPE_CHECKING:
    import torch

__all__ = ["SYNC_MODES", "DiLoCoSync", "SyncConfig", "SyncResult", "broadcast_replica_state", "optimizer_tensors", "replica_any"]

logger: logging.Logger = logging.getLogger(__name__)

SYNC_MODES = ("diloco", "per-step")


@dataclass(frozen=True)
class SyncConfig:
    """Synchronisation across replicas (env: ``MONARCH_SYNC_<FIELD>``).

    Attributes:
        mode: ``diloco`` (outer sync every ``every`` inner steps) or ``per-step``.
        every: inner steps between DiLoCo's outer syncs (>= 1).
        outer_lr: the outer optimizer's learning rate.
        outer_momentum: its Nesterov momentum.
    """

    mode: str = "diloco"
    every: int = 20
    outer_lr: float = 0.7
    outer_momentum: float = 0.9

    def __post_init__(self) -> None:
        if self.mode not in SYNC_MODES:
            raise ValueError(f"unknown sync mode {self.mode!r}: choose {' or '.join(SYNC_MODES)}")
        if self.every < 1:
            raise ValueError(f"sync every {self.every} steps: it must be a whole number of steps >= 1")

    def with_env_overrides(self) -> "SyncConfig":
        return with_env_overrides(self, "MONARCH_SYNC_")

    def to_env(self) -> dict[str, str]:
        return {"MONARCH_SYNC_MODE": self.mode, "MONARCH_SYNC_EVERY": str(self.every)}


def optimizer_tensors(optimizer: "torch.optim.Optimizer", params: "Sequence[torch.Tensor]") -> "list[torch.Tensor]":
    """The optimizer's state tensors, in parameter order (for :func:`broadcast_replica_state`)."""
    import torch

    out = []
    for p in params:
        state = optimizer.state.get(p, {})
        out += [state[k] for k in sorted(state) if isinstance(state[k], torch.Tensor)]
    return out


def replica_any(flags: "Sequence[bool]", group: Any = None) -> list[bool]:
    """Each flag OR-ed over the replica's ranks (one small allreduce; as given without a group)."""
    import torch
    import torch.distributed as dist

    if not dist.is_initialized() or dist.get_world_size(group) == 1:
        return list(flags)
    t = torch.tensor([float(f) for f in flags])
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
    return [bool(v) for v in t.tolist()]


def broadcast_replica_state(tensors: "Sequence[torch.Tensor]", group: Any = None) -> None:
    """Overwrites ``tensors`` on every rank of the replica with rank 0's (in place).

    A collective over ``group`` (default: the replica's default process
    group); every rank passes the same list of shapes.
    """
    import torch.distributed as dist

    if not dist.is_initialized() or dist.get_world_size(group) == 1:
        return
    src = dist.get_global_rank(group, 0) if group is not None else 0
    for t in tensors:
        dist.broadcast(t, src=src, group=group)


@dataclass(frozen=True)
class SyncResult:
    """How one outer sync went.

    Attributes:
        committed: the replicas' outer step was taken.
        work_kept: committed, or failed with this interval's local weights
            kept: the sync is retried after one more inner step. False: the
            weights went back to the last committed sync and the interval is
            trained again (TorchFT's behaviour; after a heal inside the sync).
    """

    committed: bool
    work_kept: bool


class DiLoCoSync:
    """TorchFT's DiLoCo over one model, telling the caller when an outer sync ran.

    The Manager must use a synchronous quorum (``use_async_quorum=False``):
    DiLoCo heals a replica at the start of an outer sync. Use as a context
    manager around the training loop and call :meth:`step` instead of
    ``inner_optimizer.step()``. An outer sync that fails (a peer died inside
    it) is retried after one more inner step with the interval's local
    weights, instead of throwing the interval away.

    A fresh process (job start, restart, replacement) joins the next outer
    sync after one inner step, instead of training ``every`` inner steps on
    weights that healing from a donor will overwrite: that is what keeps a
    restarted replica's rejoin short.
    """

    def __init__(self, manager: Any, model: "torch.nn.Module", inner_optimizer: "torch.optim.Optimizer", config: SyncConfig) -> None:
        import torch
        from torchft.local_sgd import DiLoCo

        if config.mode != "diloco":
            raise ValueError(f"DiLoCoSync needs SyncConfig(mode='diloco'), got {config.mode!r}")
        self.config = config
        self.manager = manager
        self.inner_optimizer = inner_optimizer
        self.outer_optimizer = torch.optim.SGD(
            model.parameters(), lr=config.outer_lr, momentum=config.outer_momentum, nesterov=True
        )
        self._diloco = DiLoCo(
            manager,
            [model],
            inner_optimizer,
            self.outer_optimizer,
            sync_every=config.every,
            backup_device=torch.device("cpu"),
            pin_memory=False,
        )
        self._model = model
        self._healed = False
        self._local: Optional[list[Any]] = None
        self._hook: Any = None
        manager.register_state_dict_fn("torch_monarch_healed", self._on_heal, dict)
        # DiLoCo counts inner steps since the last outer sync in `_local_step`
        # (no public accessor in torchft 0.2.0); the next step() syncs.
        self._diloco._local_step = config.every - 1

    @property
    def inner_step(self) -> int:
        """Inner steps taken since the last outer sync."""
        return int(self._diloco._local_step)

    @property
    def syncs_next(self) -> bool:
        """True when the next :meth:`step` ends with an outer sync."""
        return self.inner_step + 1 >= self.config.every

    def global_parameters(self) -> "dict[str, torch.Tensor]":
        """The weights of the last committed outer sync (DiLoCo's backup copy)."""
        return dict(self._diloco._fragments[0].original_parameters)

    def _on_heal(self, _state: Any) -> None:
        self._healed = True
        self._local = None  # the weights of before the heal are not this replica's any more

    def _keep_local_weights(self, *_: Any) -> None:
        # An optimizer post-hook registered before DiLoCo's: runs after the
        # inner update and before DiLoCo's outer sync.
        if self.inner_step + 1 >= self.config.every:
            self._local = [p.detach().clone() for p in self._model.parameters()]

    def _after_sync(self, committed: bool) -> SyncResult:
        """Retries a failed sync with the interval's work, and makes the replica's ranks agree.

        Retry: TorchFT's DiLoCo resets the weights to the last committed sync
        and trains the whole interval again; when a peer died inside the
        sync, that throws away every healthy replica's interval. Instead the
        local weights go back in and the sync runs again after one inner
        step, unless a rank of the replica healed in that sync (its weights
        of before are not this replica's any more).

        Agreement: TorchFT heals each rank of a replica on its own, and
        spreads the ranks over the up-to-date replicas (round robin by group
        rank; at step 0 each group rank has its own primary). Under DiLoCo
        each donor holds its own local weights and inner optimizer state, so
        rank 0 and rank 1 of a healed replica can disagree, and so can the
        outer averages of process group 0 and process group 1 in every
        replica. Rank 0 of every replica computed the same group-0 average,
        so giving its weights, DiLoCo's global weights and outer momentum
        (and, after a heal, its inner optimizer state) to the other ranks
        makes the whole job agree again.
        """
        import torch
        import torch.distributed as dist

        local, self._local = self._local, None
        healed, lost = replica_any([self._healed, local is None])
        self._healed = False
        kept = committed or not lost
        if not committed and kept:
            assert local is not None
            with torch.no_grad():
                for p, mine in zip(self._model.parameters(), local):
                    p.copy_(mine)
            self._diloco._local_step = self.config.every - 1
        if dist.is_initialized() and dist.get_world_size() > 1:
            params = list(self._model.parameters())
            tensors = [p.data for p in params] + list(self.global_parameters().values())
            tensors += optimizer_tensors(self.outer_optimizer, params)
            if healed:
                tensors += optimizer_tensors(self.inner_optimizer, params)
            broadcast_replica_state(tensors)
        return SyncResult(committed=committed, work_kept=kept)

    def step(self) -> Optional[SyncResult]:
        """One inner optimizer step; at the end of an interval also the outer sync.

        Returns None after an inner step only, else how the outer sync went.
        """
        syncing = self.syncs_next
        before = self.manager.current_step()
        self.inner_optimizer.step()
        if not syncing:
            return None
        return self._after_sync(self.manager.current_step() > before)

    def __enter__(self) -> "DiLoCoSync":
        self._hook = self.inner_optimizer.register_step_post_hook(self._keep_local_weights)
        self._diloco.__enter__()
        return self

    def __exit__(
        self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException], tb: Optional[TracebackType]
    ) -> bool:
        self._hook.remove()
        return bool(self._diloco.__exit__(exc_type, exc, tb))
