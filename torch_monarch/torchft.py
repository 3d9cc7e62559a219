"""A drop-in TorchFT process group backed by monarch.

``ProcessGroupMonarch`` can be given to anything in TorchFT that takes a
``torchft.process_group.ProcessGroup``: ``torchft.Manager(pg=...)``, its DDP,
LocalSGD and DiLoCo, ``PGTransport`` (tagged send/recv) and ``register()``
for functional collectives and DeviceMesh.

What it does differently from TorchFT's own groups:

* ``configure()`` for a new quorum rebuilds the group on the same endpoint
  (``MonarchBackend.reconfigure``): links to peers that are the same processes
  as before are kept and only new members are connected. The previous group
  is released afterwards. The connection to the rendezvous store is kept too
  while its address stays the same (a new key prefix per quorum).
* A dead or hung peer fails the pending op at once (hung: after the heartbeat
  timeout), so ``errored()`` marks the step failed long before any op timeout.
  ``errored()`` returns torch_monarch's typed error (``PeerFailureError`` with
  ``.failed_ranks`` etc.).
* ``set_timeout()`` applies to the next op at once, ``rank()``/``size()`` are
  the group's, and reduce_scatter / reduce_scatter_tensor_coalesced work on
  CPU tensors.

Requires ``torchft`` (``pip install 'torch_monarch[ft]'``).
"""

from __future__ import annotations

import logging
import threading
from datetime import timedelta
from typing import Any, List, Optional, Union

import torch
from torch.distributed import ProcessGroup as BaseProcessGroup
from torch.distributed.distributed_c10d import (
    AllgatherOptions,
    AllreduceCoalescedOptions,
    AllreduceOptions,
    AllToAllOptions,
    BarrierOptions,
    BroadcastOptions,
    ReduceOp,
    ReduceScatterOptions,
    Work,
)

try:
    from torchft.process_group import ProcessGroup
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError(
        "torch_monarch.torchft needs TorchFT: pip install 'torch_monarch[ft]'"
    ) from e

from torch_monarch._store_client import StoreClients
from torch_monarch.backend import new_backend
from torch_monarch.errors import AbortedError, error_from_info, MonarchError
from torch_monarch.options import Options

__all__ = ["ProcessGroupMonarch"]

logger: logging.Logger = logging.getLogger(__name__)

# After this many configures in a row failed on the kept endpoint (its links),
# the next one starts on a fresh endpoint.
_MAX_FAILED_RECONFIGURES = 2


class ProcessGroupMonarch(ProcessGroup):
    """A reconfigurable, fault-tolerant TorchFT process group on monarch.

    Args:
        timeout: timeout of the rendezvous in ``configure()`` (store
            connection and waiting for peers), and the op timeout unless
            ``MONARCH_TIMEOUT`` or ``options.timeout`` sets one.
        options: further monarch settings (op and heartbeat timeouts, bind
            address, algorithm thresholds). ``MONARCH_*`` environment
            variables apply on top, as for
            ``init_process_group(backend="monarch")``.

    ``set_timeout()`` wins over all of these for the ops after it, in this
    group and in every later configure's (the precedence documented in
    ``torch_monarch.options``).

    Each instance owns its own endpoint, so several ranks of one group may
    live in one process (on threads).
    """

    def __init__(
        self,
        timeout: timedelta = timedelta(seconds=60),
        options: Optional[Options] = None,
    ) -> None:
        super().__init__(0, 1)
        self._timeout: timedelta = timeout
        # Set by set_timeout(): the op timeout of every group from then on.
        self._op_timeout: Optional[timedelta] = None
        self._options: Optional[Options] = options
        # Guards the fields below; never held across a blocking call.
        self._lock = threading.Lock()
        self._stores = StoreClients()
        self._backend: Optional[Any] = None  # torch_monarch._C.MonarchBackend
        self._pg: Optional[BaseProcessGroup] = None
        # Why the group is unusable (failed configure, abort); cleared by the
        # next successful configure.
        self._error: Optional[Exception] = None
        # Configures in a row that failed on the kept endpoint.
        self._failed_reconfigures: int = 0
        self._rank: int = 0
        self._world_size: int = 1
        self._replica_id: Optional[str] = None
        self._quorum_id: Optional[int] = None
        self._group_rank: Optional[int] = None
        self._group_world_size: Optional[int] = None
        self._global_ranks: Optional[list[int]] = None

    # ------------------------------------------------------------------
    # Lifecycle
    # ------------------------------------------------------------------

    def configure(
        self,
        store_addr: str,
        replica_id: str,
        rank: int,
        world_size: int,
        quorum_id: Optional[int] = None,
        group_rank: Optional[int] = None,
        group_world_size: Optional[int] = None,
        global_ranks: Optional[list[int]] = None,
    ) -> None:
        """Joins the group at ``store_addr`` (``host:port/prefix``, a new prefix
        for every quorum) as ``rank`` of ``world_size``.

        Reuses this process group's endpoint when it has one: links to peers
        that are the same processes as in the previous quorum stay up, and only
        new members are connected. The previous group is released afterwards.
        Every member must call this for the same ``store_addr``. Raises a
        ``MonarchError`` naming the rank, world size and quorum when the group
        cannot be formed within the timeout; the process group is then unusable
        (``errored()`` returns the error) until a later configure succeeds. The
        endpoint is kept for that, unless configures on it failed twice in a
        row: then the next starts on a fresh one.
        """
        if not 0 <= rank < world_size:
            raise ValueError(f"ProcessGroupMonarch.configure: rank {rank} is not in a group of size {world_size}")
        dropped = None
        with self._lock:
            previous = self._backend
            if previous is not None and self._failed_reconfigures >= _MAX_FAILED_RECONFIGURES:
                # Configures on the kept endpoint failed again and again: start afresh.
                dropped, previous, self._backend = previous, None, None
            self._pg = None  # no op may start on the group being replaced
            self._replica_id = replica_id
            self._quorum_id = quorum_id
            self._group_rank = group_rank
            self._group_world_size = group_world_size
            self._global_ranks = global_ranks
            timeout = self._timeout
            op_timeout = self._op_timeout

        if dropped is not None:
            logger.warning("dropping the endpoint after %d failed configures", self._failed_reconfigures)
            dropped.abort()
        _, _, prefix = store_addr.partition("/")
        # The same on every member, and new for every quorum (the prefix is).
        group_name = f"torchft/{prefix}/{quorum_id}"
        reused = previous is not None
        try:
            store = self._stores.prefixed(store_addr, timeout)
            if previous is not None:
                backend = previous.reconfigure(store, rank, world_size, group_name)
            else:
                backend = new_backend(store, rank, world_size, group_name, timeout, self._options)
            if op_timeout is not None:
                # set_timeout() applies to this group as to the previous one.
                backend.set_timeout(op_timeout)
            pg = _wrap_backend(store, rank, world_size, backend)
        except Exception as e:
            error = _configure_error(e, store_addr, rank, world_size, quorum_id, reused)
            logger.warning("%s", error)
            self._stores.forget(store_addr)
            with self._lock:
                # Keep `previous` (and its endpoint) for the next attempt.
                self._error = error
                self._failed_reconfigures = self._failed_reconfigures + 1 if reused else 0
            raise error from e

        with self._lock:
            self._backend = backend
            self._pg = pg
            self._error = None
            self._failed_reconfigures = 0
            self._rank = rank
            self._world_size = world_size
        logger.info(
            "configured rank %d/%d quorum %s (%s) connections=%d",
            rank,
            world_size,
            quorum_id,
            "reconfigured" if reused else "new endpoint",
            backend.connection_count(),
        )
        if previous is not None:
            _release(previous)

    def abort(self) -> None:
        """Fails every pending op with ``AbortedError`` at once and releases the
        endpoint; never blocks on peers. ``errored()`` reports the abort and
        the next ``configure()`` starts on a fresh endpoint."""
        with self._lock:
            backend, self._backend, self._pg = self._backend, None, None
            self._error = AbortedError(f"ProcessGroupMonarch rank {self._rank} was aborted")
        if backend is not None:
            logger.info("aborting rank %d", self._rank)
            backend.abort()

    def shutdown(self) -> None:
        """Releases the endpoint in order: queued ops finish first (each bounded
        by its timeout) and peers are told goodbye rather than seeing a
        failure. The process group may be configured again afterwards."""
        with self._lock:
            backend, self._backend, self._pg = self._backend, None, None
        if backend is not None:
            backend.shutdown()

    def errored(self) -> Optional[Exception]:
        """The error that broke the current group (a ``MonarchError`` subclass:
        ``PeerFailureError`` with ``.failed_ranks``, ``CollectiveTimeoutError``,
        ``AbortedError``, ...), or None while it is healthy."""
        with self._lock:
            if self._error is not None:
                return self._error
            backend = self._backend
        if backend is None:
            return None
        return error_from_info(backend.error_info())

    def set_timeout(self, timeout: timedelta) -> None:
        """Sets the op timeout, over ``options.timeout`` and ``MONARCH_TIMEOUT``:
        ops started from now on use it, in this group and in those of later
        configures, and so does the next configure's rendezvous."""
        with self._lock:
            self._timeout = timeout
            self._op_timeout = timeout
            backend = self._backend
        if backend is not None:
            backend.set_timeout(timeout)

    # ------------------------------------------------------------------
    # Identity
    # ------------------------------------------------------------------

    def rank(self) -> int:
        return self._rank

    def size(self) -> int:
        return self._world_size

    # The C++ side of the ProcessGroup (e.g. DDP's reducer) asks these names.
    def getRank(self) -> int:
        return self._rank

    def getSize(self) -> int:
        return self._world_size

    def getBackendName(self) -> str:
        return "torchft-monarch"

    def connection_count(self) -> int:
        """Live connections of this process group's endpoint (0 when none)."""
        backend = self._backend
        return backend.connection_count() if backend is not None else 0

    # ------------------------------------------------------------------
    # Collectives: forwarded to the c10d ProcessGroup over the backend.
    # ------------------------------------------------------------------

    def allgather(
        self,
        output_tensors: List[List[torch.Tensor]],
        input_tensor: List[torch.Tensor],
        opts: AllgatherOptions,
    ) -> Work:
        return self._group().allgather(output_tensors, input_tensor, opts)

    def allgather_into_tensor_coalesced(
        self,
        output_tensors: List[torch.Tensor],
        input_tensors: List[torch.Tensor],
        opts: AllgatherOptions,
    ) -> Work:
        return self._group().allgather_into_tensor_coalesced(output_tensors, input_tensors, opts)

    def allreduce(
        self,
        tensors: List[torch.Tensor],
        opts: Union[AllreduceOptions, ReduceOp],
    ) -> Work:
        return self._group().allreduce(tensors, opts)

    def allreduce_coalesced(
        self,
        tensors: List[torch.Tensor],
        opts: Union[AllreduceCoalescedOptions, ReduceOp],
    ) -> Work:
        return self._group().allreduce_coalesced(tensors, opts)

    def alltoall_base(
        self,
        output_buffer: torch.Tensor,
        input_buffer: torch.Tensor,
        output_split_sizes: List[int],
        input_split_sizes: List[int],
        opts: AllToAllOptions,
    ) -> Work:
        return self._group().alltoall_base(output_buffer, input_buffer, output_split_sizes, input_split_sizes, opts)

    def barrier(self, opts: Optional[BarrierOptions] = None) -> Work:
        return self._group().barrier(opts if opts is not None else BarrierOptions())

    def broadcast(
        self,
        tensor_list: List[torch.Tensor],
        opts: Union[BroadcastOptions, int],
    ) -> Work:
        return self._group().broadcast(tensor_list, opts)

    def reduce_scatter(
        self,
        output_tensors: List[torch.Tensor],
        input_tensors: List[List[torch.Tensor]],
        opts: ReduceScatterOptions,
    ) -> Work:
        return self._group().reduce_scatter(output_tensors, input_tensors, opts)

    def reduce_scatter_tensor_coalesced(
        self,
        output_tensors: List[torch.Tensor],
        input_tensors: List[torch.Tensor],
        opts: ReduceScatterOptions,
    ) -> Work:
        return self._group().reduce_scatter_tensor_coalesced(output_tensors, input_tensors, opts)

    def send(self, tensors: List[torch.Tensor], dst_rank: int, tag: int = 0) -> Work:
        return self._group().send(tensors, dst_rank, tag)

    def recv(self, tensors: List[torch.Tensor], src_rank: int, tag: int = 0) -> Work:
        return self._group().recv(tensors, src_rank, tag)

    def _group(self) -> BaseProcessGroup:
        pg = self._pg
        if pg is not None:
            return pg
        error = self._error
        if error is not None:
            raise type(error)(
                f"ProcessGroupMonarch rank {self._rank} has no usable group until configure() succeeds: {error}",
                getattr(error, "failed_ranks", ()),
            )
        raise RuntimeError("ProcessGroupMonarch: process group not initialized; call configure() first")

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(rank={self._rank}, size={self._world_size}, "
            f"quorum_id={self._quorum_id}, replica_id={self._replica_id!r})"
        )


def _wrap_backend(store: Any, rank: int, world_size: int, backend: Any) -> BaseProcessGroup:
    """A c10d ProcessGroup that dispatches every device's ops to ``backend``,
    so that all of c10d's collectives (incl. the coalesced ones the Backend's
    Python binding lacks) reach it."""
    pg = BaseProcessGroup(store, rank, world_size)
    backend_type = BaseProcessGroup.BackendType.CUSTOM
    pg._set_default_backend(backend_type)
    pg._register_backend(torch.device("cpu"), backend_type, backend)
    if torch.cuda.is_available():
        pg._register_backend(torch.device("cuda"), backend_type, backend)
    return pg


def _release(backend: Any) -> None:
    """Releases a replaced group: aborted when broken (its pending ops cannot
    finish), else shut down in order. Its endpoint stays with the new group."""
    try:
        if backend.error_info() is not None:
            backend.abort()
        else:
            backend.shutdown()
    except Exception:  # releasing the old group must not fail the new one
        logger.exception("releasing the previous monarch group failed")


def _configure_error(
    error: Exception,
    store_addr: str,
    rank: int,
    world_size: int,
    quorum_id: Optional[int],
    reused: bool,
) -> MonarchError:
    how = "reconfigure from the previous group" if reused else "new endpoint"
    message = (
        f"ProcessGroupMonarch.configure failed: rank {rank} of {world_size}, quorum_id={quorum_id}, "
        f"store {store_addr!r} ({how}): {error}"
    )
    if isinstance(error, MonarchError):
        return type(error)(message, error.failed_ranks)
    return MonarchError(message)
