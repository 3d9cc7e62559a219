"""Forming a ProcessGroupMonarch through either TorchFT generation's entry point.

``form(pg, entry, ...)`` joins a group the way TorchFT 0.2's Manager does
(``configure``) or the way TorchFT 0.3's does (``set_rank_info``, handles
exchanged, ``reconfigure(opts)``). Without a Manager, the handles go through
the test's store under the same prefix, and rank 0 picks the uuid.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Optional, Union

import pytest
from torch.distributed import PrefixStore, TCPStore

__all__ = ["ENTRY_POINTS", "form", "reconfigure_options"]

# For @pytest.mark.parametrize("entry", ENTRY_POINTS). The reconfigure entry
# point runs on stack 2 as well, with torch 2.14's own ReconfigureOptions.
ENTRY_POINTS = [
    "configure",
    pytest.param("reconfigure", marks=pytest.mark.newest_stack),
]


@dataclass
class _Options:
    """ReconfigureOptions where neither torch (< 2.14) nor TorchFT (0.2) has them."""

    uuid: int = 0
    handles: Union[list[str], set[str]] = field(default_factory=list)
    timeout: Optional[timedelta] = None
    hints: dict[str, str] = field(default_factory=dict)


def reconfigure_options(uuid: int, handles: Union[list[str], set[str]], timeout: Optional[timedelta] = None) -> Any:
    """The ReconfigureOptions of the installed torch, else a stand-in with the same fields."""
    try:
        from torch._C._distributed_c10d import ReconfigureOptions  # torch >= 2.14
    except ImportError:
        ReconfigureOptions = _Options
    opts = ReconfigureOptions()
    opts.uuid = uuid
    opts.handles = handles
    opts.timeout = timeout
    return opts


def form(
    pg: Any,
    entry: str,
    store_port: int,
    prefix: str,
    rank: int,
    world_size: int,
    formation_id: int,
    timeout: Optional[timedelta] = None,
) -> None:
    """Joins the group ``prefix`` (new for every formation) as ``rank`` of
    ``world_size``; ``timeout`` is reconfigure's (None: the group's own)."""
    if entry == "configure":
        pg.configure(f"localhost:{store_port}/{prefix}", "replica", rank, world_size, quorum_id=formation_id)
        return
    assert entry == "reconfigure", entry
    wait = timedelta(seconds=30)
    store = PrefixStore(prefix, TCPStore("localhost", store_port, is_master=False, wait_for_workers=False, timeout=wait))
    pg.set_rank_info("replica", 0, 1, rank)
    store.set(f"handle/{rank}", pg.get_reconfigure_handle())
    keys = [f"handle/{peer}" for peer in range(world_size)]
    store.wait(keys, wait)
    handles = [value.decode() for value in store.multi_get(keys)]
    pg.reconfigure(reconfigure_options(formation_id, handles, timeout)).wait()
