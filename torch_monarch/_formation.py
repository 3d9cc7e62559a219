"""The one request ``ProcessGroupMonarch`` forms a group from, whichever TorchFT asks.

TorchFT 0.2 calls ``configure(store_addr, replica_id, rank, world_size,
quorum_id, ...)``. TorchFT 0.3 (and torchft-nightly) calls ``set_rank_info``
once, sends ``get_reconfigure_handle()`` to the Lighthouse with each quorum
request and calls ``reconfigure(ReconfigureOptions(uuid, handles, timeout))``
with the handles of the new quorum. Each entry point turns its arguments into
a :class:`Formation` here; the process group forms its group from that alone.

A handle is JSON: ``{"id", "store", "global_rank", "kind"}``. ``store`` is the
``host:port`` of a TCPStore the process group hosts; every member meets on
the first handle's store under ``torchft/<uuid>``, as TorchFT's own groups do,
so TorchFT's ``_rendezvous`` reads these handles too. ``kind`` tells a
handle of this group from another group's.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Optional

__all__ = ["Formation", "from_configure", "from_reconfigure", "make_handle"]

HANDLE_KIND = "torch_monarch.ProcessGroupMonarch"


@dataclass(frozen=True)
class Formation:
    """Form the group of ``world_size`` members as ``rank``, meeting at ``store_addr``."""

    # host:port/prefix; the prefix is new for every formation.
    store_addr: str
    rank: int
    world_size: int
    # The same on every member and new for every formation.
    group_name: str
    # The request as errors and logs name it, e.g. "configure(quorum_id=3)".
    request: str
    # The rendezvous timeout the request sets, if any.
    timeout: Optional[timedelta] = None
    # TorchFT's id of the formation (quorum id or uuid), if it gave one.
    formation_id: Optional[int] = None
    global_ranks: Optional[list[int]] = None


def from_configure(
    store_addr: str,
    rank: int,
    world_size: int,
    quorum_id: Optional[int],
    global_ranks: Optional[list[int]],
) -> Formation:
    """TorchFT 0.2's ``configure()``: the store address and rank come from the Manager."""
    if not 0 <= rank < world_size:
        raise ValueError(f"ProcessGroupMonarch.configure: rank {rank} is not in a group of size {world_size}")
    _, _, prefix = store_addr.partition("/")
    return Formation(
        store_addr=store_addr,
        rank=rank,
        world_size=world_size,
        group_name=f"torchft/{prefix}/{quorum_id}",
        request=f"configure(quorum_id={quorum_id})",
        formation_id=quorum_id,
        global_ranks=global_ranks,
    )


def make_handle(handle_id: str, store_host: str, store_port: int, global_rank: Optional[int]) -> str:
    """This member's reconfigure handle."""
    return json.dumps({"id": handle_id, "store": f"{store_host}:{store_port}", "global_rank": global_rank, "kind": HANDLE_KIND})


def from_reconfigure(opts: Any, handle_id: str) -> Formation:
    """TorchFT 0.3's ``reconfigure(opts)``: this member's rank is the position of
    its own handle in ``opts.handles`` (a set is put in one order every member
    agrees on). Raises ``ValueError`` naming what is wrong with the handles."""
    uuid = opts.uuid
    if not isinstance(uuid, int) or isinstance(uuid, bool):
        raise ValueError(f"ProcessGroupMonarch.reconfigure: uuid must be an int, got {uuid!r}")
    raw = opts.handles
    if isinstance(raw, (set, frozenset)):
        raw = sorted(raw)
    if not isinstance(raw, list):
        raise ValueError(f"ProcessGroupMonarch.reconfigure: handles must be a list or a set, got {type(raw).__name__}")
    if not raw:
        raise ValueError("ProcessGroupMonarch.reconfigure: the handle list is empty")
    peers = [_parse_handle(position, handle) for position, handle in enumerate(raw)]
    ids = [peer["id"] for peer in peers]
    if len(set(ids)) != len(ids):
        raise ValueError(f"ProcessGroupMonarch.reconfigure: a handle appears more than once in {ids}")
    if handle_id not in ids:
        raise ValueError(
            f"ProcessGroupMonarch.reconfigure: this process group's handle ({handle_id}) is not among the "
            f"{len(ids)} handles (handles of another group or job?)"
        )
    global_ranks = [peer["global_rank"] for peer in peers]
    return Formation(
        store_addr=f"{peers[0]['store']}/torchft/{uuid}",
        rank=ids.index(handle_id),
        world_size=len(peers),
        group_name=f"torchft/reconfigure/{uuid}",
        request=f"reconfigure(uuid={uuid})",
        timeout=opts.timeout,
        formation_id=uuid,
        global_ranks=None if None in global_ranks else global_ranks,
    )


def _parse_handle(position: int, handle: Any) -> dict[str, Any]:
    where = f"ProcessGroupMonarch.reconfigure: handle {position}"
    if isinstance(handle, bytes):
        handle = handle.decode("utf-8", errors="replace")
    try:
        peer = json.loads(handle)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{where} is not a reconfigure handle (JSON): {handle!r:.80}") from e
    if not isinstance(peer, dict):
        raise ValueError(f"{where} is not a reconfigure handle (JSON object): {handle!r:.80}")
    if peer.get("kind") != HANDLE_KIND:
        raise ValueError(f"{where} is not ProcessGroupMonarch's (kind {peer.get('kind')!r}): {handle!r:.80}")
    store = peer.get("store")
    host, _, port = store.rpartition(":") if isinstance(store, str) else ("", "", "")
    if not isinstance(peer.get("id"), str) or not host or not port.isdigit():
        raise ValueError(f"{where} lacks an id or a host:port store: {handle!r:.80}")
    global_rank = peer.get("global_rank")
    if global_rank is not None and (not isinstance(global_rank, int) or isinstance(global_rank, bool)):
        raise ValueError(f"{where} has a global_rank that is not an int: {global_rank!r}")
    return peer
