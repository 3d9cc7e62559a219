"""Registration of the "monarch" backend with torch.distributed."""

from __future__ import annotations

import logging
from typing import Any, Optional

import torch.distributed as dist

from torch_monarch.options import Options

__all__ = ["BACKEND_NAME", "register"]

BACKEND_NAME = "monarch"

logger: logging.Logger = logging.getLogger(__name__)


def _create_backend(dist_options: Any, pg_options: Optional[Options]) -> Any:
    """Creator called by torch.distributed for every new monarch group."""
    if pg_options is None:
        pg_options = Options()
    if not isinstance(pg_options, Options):
        raise TypeError(
            f"pg_options for the monarch backend must be torch_monarch.Options, got {type(pg_options).__name__}"
        )
    options = pg_options.with_env_overrides()
    timeout = options.timeout if options.timeout is not None else dist_options.timeout
    # The extension is loaded only now, so that `import torch` stays cheap.
    from torch_monarch import _C

    logger.debug(
        "creating monarch group %s rank %d/%d", dist_options.group_id, dist_options.group_rank, dist_options.group_size
    )
    return _C.create_backend(
        store=dist_options.store,
        rank=dist_options.group_rank,
        size=dist_options.group_size,
        group_name=str(dist_options.group_id),
        timeout=timeout,
        heartbeat_timeout=options.heartbeat_timeout,
        bind_address=options.bind_address,
        small_message_bytes=options.small_message_bytes,
        chunk_bytes=options.chunk_bytes,
    )


def register() -> None:
    """Registers "monarch" with torch.distributed; safe to call repeatedly."""
    if BACKEND_NAME.upper() in dist.Backend._plugins:
        return
    dist.Backend.register_backend(BACKEND_NAME, _create_backend, extended_api=True, devices=["cpu", "cuda"])
