"""Exceptions raised by monarch process groups.

All subclass ``torch.distributed.DistBackendError``, so code written for
NCCL or Gloo errors keeps working; ``.failed_ranks`` names the group ranks
involved. The C++ backend raises these types directly: the table of failure
kinds in csrc/common/status.h (``MONARCH_ERROR_KINDS``) names the class of
each kind, and ``error_from_info`` looks kinds up in the same table.
"""

from __future__ import annotations

from typing import Optional, Sequence

from torch.distributed import DistBackendError

__all__ = [
    "MonarchError",
    "PeerFailureError",
    "CollectiveTimeoutError",
    "AbortedError",
    "CollectiveMismatchError",
    "ProtocolError",
    "RdmaUnavailableError",
    "error_from_info",
]


class MonarchError(DistBackendError):
    """Base of torch_monarch's errors. ``failed_ranks``: group ranks involved."""

    def __init__(self, message: str, failed_ranks: Sequence[int] = ()) -> None:
        super().__init__(message)
        self.failed_ranks: list[int] = sorted(set(failed_ranks))

    def __reduce__(self) -> tuple[type, tuple[str, list[int]]]:
        # Keeps the type and ranks when sent between processes.
        return (type(self), (str(self), self.failed_ranks))


class PeerFailureError(MonarchError):
    """A peer process died, hung, aborted or was cut off."""


class CollectiveTimeoutError(MonarchError):
    """An op did not finish within its timeout; ``failed_ranks`` had not joined it."""


class AbortedError(MonarchError):
    """The group was aborted on this rank."""


class CollectiveMismatchError(MonarchError):
    """Ranks called different ops, sizes, dtypes, roots or reduce ops at one sequence number."""


class ProtocolError(MonarchError):
    """Corrupt or unexpected bytes on a link."""


class RdmaUnavailableError(RuntimeError):
    """``transport="rdma"`` cannot be had here: libfabric is missing (the message says what to
    install) or no provider offers what the transport needs. Raised when the group is created,
    before anything is sent; not a peer's failure, so not a ``MonarchError``."""


def error_from_info(info: Optional[tuple[str, Sequence[int], str]]) -> Optional[MonarchError]:
    """The typed error for a backend's ``error_info()``; None while it is healthy.

    Unknown kinds map to the base ``MonarchError`` rather than being dropped.
    """
    if info is None:
        return None
    # Loaded already: the info came from one of its backends.
    from torch_monarch import _C

    kind, ranks, message = info
    return _error_class(_C.ERROR_CLASSES.get(kind, MonarchError.__name__))(message, ranks)


def _error_class(name: str) -> type[MonarchError]:
    """The class the C++ table of failure kinds names ``name``; ``MonarchError`` if none."""
    candidates: list[type[MonarchError]] = [MonarchError, *MonarchError.__subclasses__()]
    classes = {c.__name__: c for c in candidates}
    return classes.get(name, MonarchError)
