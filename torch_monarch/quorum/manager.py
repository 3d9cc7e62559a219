"""TorchFT's Manager, wired for a replica supervised by torch_monarch.

Inside a replica, workers talk over the "monarch" backend (the default
process group). Across replicas, worker ``r`` of every replica belongs to
one TorchFT process group, reconfigured by the Manager at each quorum
change; by default that group is ``ProcessGroupMonarch``.

:func:`make_manager` also gives every incarnation of a replica a fresh
TCPStore for the Manager: the agent's store survives worker restarts, and a
restarted worker must not read the previous incarnation's Manager address.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Callable, ClassVar, Optional

from torch_monarch._config import Config
from torch_monarch._store_client import advertised_host
from torch_monarch.quorum.process_group import make_process_group

__all__ = ["QuorumConfig", "make_manager"]

logger: logging.Logger = logging.getLogger(__name__)

_STORE_KEY = "monarch/manager_store"


@dataclass(frozen=True)
class QuorumConfig(Config):
    """How a replica takes part in quorums (env: ``MONARCH_QUORUM_<FIELD>``,
    durations in seconds).

    Attributes:
        pg: cross-replica process group, ``monarch`` or ``gloo`` (empty:
            ``$MONARCH_FT_PG``, else monarch).
        timeout: collectives, should_commit and checkpoint transfer.
        quorum_timeout: how long a quorum request may wait.
        connect_timeout: RPC connections to the Manager and Lighthouse.
        heartbeat_interval: Manager → Lighthouse heartbeats.
        min_replica_size: fewest replicas that may commit a step.
    """

    ENV_PREFIX: ClassVar[str] = "MONARCH_QUORUM_"

    pg: str = ""
    timeout: timedelta = timedelta(seconds=30)
    quorum_timeout: timedelta = timedelta(seconds=60)
    connect_timeout: timedelta = timedelta(seconds=10)
    heartbeat_interval: timedelta = timedelta(milliseconds=100)
    min_replica_size: int = 1


def _manager_store(rank: int, world_size: int) -> tuple[Any, str, int]:
    """A TCPStore for this incarnation's Manager: (store, host, port)."""
    import torch.distributed as dist
    from torch.distributed import TCPStore

    if rank == 0:
        host = advertised_host()
        store = TCPStore(host_name=host, port=0, is_master=True, wait_for_workers=False)
        port = store.port
        if world_size > 1:
            dist.distributed_c10d._get_default_store().set(_STORE_KEY, f"{host}:{port}")
        return store, host, port
    if not dist.is_initialized():
        raise RuntimeError("make_manager: ranks > 0 need the replica's default process group initialised first")
    address = dist.distributed_c10d._get_default_store().get(_STORE_KEY).decode()
    host, port_text = address.rsplit(":", 1)
    return None, host, int(port_text)


def make_manager(
    *,
    state_dict: Callable[[], Any],
    load_state_dict: Callable[[Any], None],
    replica_id: str,
    config: QuorumConfig = QuorumConfig(),
    lighthouse_addr: Optional[str] = None,
    pg: Any = None,
    rank: Optional[int] = None,
    world_size: Optional[int] = None,
    **manager_kwargs: Any,
) -> Any:
    """A ``torchft.Manager`` for this worker.

    Call after ``init_process_group`` (ranks > 0 read the Manager's store
    address from the replica's default store). ``replica_id`` should end in
    the replica's number (TorchFT derives global ranks from it).
    ``lighthouse_addr`` defaults to ``$TORCHFT_LIGHTHOUSE``.
    """
    from torchft import Manager

    rank = int(os.environ.get("RANK", "0")) if rank is None else rank
    world_size = int(os.environ.get("WORLD_SIZE", "1")) if world_size is None else world_size
    store, host, port = _manager_store(rank, world_size)
    if pg is None:
        pg = make_process_group(config.pg or None, config.timeout)
    manager = Manager(
        pg=pg,
        load_state_dict=load_state_dict,
        state_dict=state_dict,
        min_replica_size=config.min_replica_size,
        timeout=config.timeout,
        quorum_timeout=config.quorum_timeout,
        connect_timeout=config.connect_timeout,
        heartbeat_interval=config.heartbeat_interval,
        rank=rank,
        world_size=world_size,
        store_addr=host,
        store_port=port,
        lighthouse_addr=lighthouse_addr or os.environ.get("TORCHFT_LIGHTHOUSE"),
        replica_id=replica_id,
        hostname=host,
        **manager_kwargs,
    )
    # Keep this incarnation's store server alive as long as the Manager.
    manager._monarch_store = store
    logger.info("replica %s rank %d: manager on store %s:%d with %s", replica_id, rank, host, port, type(pg).__name__)
    return manager
