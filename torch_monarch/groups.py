"""The public way to a monarch group's own API, beyond torch.distributed's.

``torch.distributed`` hands out a ``ProcessGroup``; what only monarch has
(why a group broke, rebuilding it for a new membership on the same links)
lives on the group's ``torch_monarch._C.MonarchBackend``:

* :func:`backend_of` returns it: ``error_info()``, ``reconfigure(store,
  rank, size, group_name)``, ``connection_count()``, ``payload_bytes_sent()``
  and everything of ``c10d.Backend`` (abort, shrink, set_timeout, ...);
* :func:`group_error` is the typed error that broke a group, or None.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional, Union

import torch
import torch.distributed as dist

from torch_monarch.errors import error_from_info, MonarchError

if TYPE_CHECKING:
    from torch_monarch._C import MonarchBackend

__all__ = ["backend_of", "group_error"]


def backend_of(
    group: Optional[dist.ProcessGroup] = None, device: Union[str, torch.device] = "cpu"
) -> "MonarchBackend":
    """The monarch backend that runs ``group``'s ops on ``device`` (default: the world's, CPU).

    Raises TypeError when that backend is not monarch (e.g. a Gloo group).
    """
    from torch_monarch import _C

    pg = group if group is not None else dist.group.WORLD
    if pg is None:
        raise RuntimeError("backend_of: torch.distributed is not initialized and no group was given")
    backend = pg._get_backend(torch.device(device))
    if not isinstance(backend, _C.MonarchBackend):
        raise TypeError(f"backend_of: the group's {device} backend is {type(backend).__name__}, not monarch")
    return backend


def group_error(group: Optional[dist.ProcessGroup] = None) -> Optional[MonarchError]:
    """The error that broke ``group`` (``PeerFailureError`` with ``.failed_ranks``,
    ``CollectiveTimeoutError``, ...), or None while it is healthy."""
    return error_from_info(backend_of(group).error_info())
