"""Registration of the "monarch" backend with torch.distributed."""

from __future__ import annotations

import dataclasses
import logging
import os
from datetime import timedelta
from typing import Any, Optional

import torch
import torch.distributed as dist

from torch_monarch.options import Options

__all__ = ["BACKEND_NAME", "new_backend", "register"]

BACKEND_NAME = "monarch"

logger: logging.Logger = logging.getLogger(__name__)


def new_backend(
    store: dist.Store,
    rank: int,
    size: int,
    group_name: str,
    timeout: timedelta,
    options: Optional[Options] = None,
    enable_reconfigure: bool = False,
) -> Any:
    """Joins a new monarch group on a fresh endpoint and returns its backend.

    Blocks until every rank of the group has connected through ``store`` (or
    ``timeout`` passes). ``options`` get their ``MONARCH_*`` environment
    overrides applied here; ``MONARCH_TIMEOUT`` or ``options.timeout``, when
    set, wins over ``timeout`` (the precedence in ``torch_monarch.options``).
    The returned ``torch_monarch._C.MonarchBackend`` is a ``c10d.Backend``.

    With ``enable_reconfigure`` (or ``options.enable_reconfigure``; torch >=
    2.14) it connects nobody: the group is a group of one on a fresh endpoint
    until c10d's ``reconfigure`` forms it from the members' handles, in
    place, taking handles of its job only (``Options.job``).
    """
    resolved = (options if options is not None else Options()).with_env_overrides()
    resolved = dataclasses.replace(
        resolved,
        timeout=resolved.timeout if resolved.timeout is not None else timeout,
        enable_reconfigure=resolved.enable_reconfigure or enable_reconfigure,
        # The replicas of one TorchFT job share their Lighthouse.
        job=resolved.job or os.environ.get("TORCHFT_LIGHTHOUSE", ""),
    )
    # The extension is loaded only now, so that `import torch` stays cheap.
    from torch_monarch import _C

    if resolved.enable_reconfigure and not _C.NATIVE_RECONFIGURE:
        raise RuntimeError(
            f"enable_reconfigure needs torch >= 2.14 (c10d's native reconfigure); torch_monarch was built against "
            f"a torch without it (this is torch {torch.__version__})"
        )
    logger.debug("creating monarch group %s rank %d/%d", group_name, rank, size)
    return _C.create_backend(store=store, rank=rank, size=size, group_name=group_name, options=resolved)


def _restart_round_store(store: dist.Store) -> dist.Store:
    """``store`` with this torchelastic restart round's own key space.

    torchrun's workers rendezvous on the agent's TCPStore, which outlives a
    restart of the worker group: without a per-round prefix, a restarted rank
    could read the addresses and token that the previous round's ranks left
    under the same keys. Every worker of one agent gets the same
    ``TORCHELASTIC_RESTART_COUNT``; outside torchelastic the store is unchanged.
    """
    restart_round = os.environ.get("TORCHELASTIC_RESTART_COUNT")
    if restart_round is None:
        return store
    return dist.PrefixStore(f"monarch_restart_{restart_round}", store)


def _create_backend(dist_options: Any, pg_options: Optional[Options]) -> Any:
    """Creator called by torch.distributed for every new monarch group."""
    if pg_options is not None and not isinstance(pg_options, Options):
        raise TypeError(
            f"pg_options for the monarch backend must be torch_monarch.Options, got {type(pg_options).__name__}"
        )
    return new_backend(
        store=_restart_round_store(dist_options.store),
        rank=dist_options.group_rank,
        size=dist_options.group_size,
        group_name=str(dist_options.group_id),
        timeout=dist_options.timeout,
        options=pg_options,
        # torch >= 2.14 passes it (init_process_group(enable_reconfigure=True)); older torch has no such field.
        enable_reconfigure=getattr(dist_options, "enable_reconfigure", False),
    )


def register() -> None:
    """Registers "monarch" with torch.distributed; safe to call repeatedly."""
    if BACKEND_NAME.upper() in dist.Backend._plugins:
        return
    dist.Backend.register_backend(BACKEND_NAME, _create_backend, extended_api=True, devices=["cpu", "cuda"])
