"""A drop-in TorchFT process group backed by monarch.

``ProcessGroupMonarch`` can be given to anything in TorchFT that takes a
``torchft.process_group.ProcessGroup``: ``torchft.Manager(pg=...)``, its DDP,
LocalSGD and DiLoCo, ``PGTransport`` (tagged send/recv) and ``register()``
for functional collectives and DeviceMesh.

It speaks both TorchFT generations, whichever the installed one calls:
0.2's ``configure()`` and 0.3's ``set_rank_info`` / ``get_reconfigure_handle``
/ ``reconfigure(opts)``. Each turns its arguments into one request
(``torch_monarch._formation``), and the group is formed from that.

What it does differently from TorchFT's own groups:

* Forming the group for a new quorum rebuilds it on the same endpoint
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
import uuid
from datetime import timedelta
from typing import Any, List, Optional, Union

import torch
from torch.distributed import ProcessGroup as BaseProcessGroup, TCPStore
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
        "torch_monarch.torchft needs TorchFT: pip install 'torch_monarch[ft]' (TorchFT 0.2) "
        "or 'torch_monarch[ft-nightly]' (TorchFT 0.3's reconfigure API)"
    ) from e

from torch_monarch._formation import Formation, from_configure, from_reconfigure, make_handle
from torch_monarch._store_client import advertised_host, StoreClients
from torch_monarch.backend import new_backend
from torch_monarch.errors import AbortedError, error_from_info, MonarchError
from torch_monarch.options import Options

__all__ = ["ProcessGroupMonarch"]

logger: logging.Logger = logging.getLogger(__name__)

# After this many requests to form the group failed in a row on the kept
# endpoint (its links), the next one starts on a fresh endpoint.
_MAX_FAILED_RECONFIGURES = 2


class ProcessGroupMonarch(ProcessGroup):
    """A reconfigurable, fault-tolerant TorchFT process group on monarch.

    Args:
        timeout: timeout of the rendezvous when forming a group (store
            connection and waiting for peers) unless ``reconfigure``'s
            options set one, and the op timeout unless ``MONARCH_TIMEOUT``
            or ``options.timeout`` sets one.
        options: further monarch settings (op and heartbeat timeouts, bind
            address, algorithm thresholds). ``MONARCH_*`` environment
            variables apply on top, as for
            ``init_process_group(backend="monarch")``.

    ``set_timeout()`` wins over all of these for the ops after it, in this
    group and in every later one's (the precedence documented in
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
        # Why the group is unusable (failed request, abort); cleared by the
        # next group formed.
        self._error: Optional[Exception] = None
        # Requests in a row that failed on the kept endpoint.
        self._failed_reconfigures: int = 0
        self._rank: int = 0
        self._world_size: int = 1
        # The last request to form the group.
        self._formation: Optional[Formation] = None
        # Identity from configure() or set_rank_info().
        self._replica_id: Optional[str] = None
        self._group_rank: Optional[int] = None
        self._group_world_size: Optional[int] = None
        self._global_rank: Optional[int] = None
        # TorchFT 0.3: this member's handle id, the rendezvous store it hosts
        # (made by the first get_reconfigure_handle) and the uuids it was given.
        self._id: str = uuid.uuid4().hex
        self._hosted_store: Optional[TCPStore] = None
        self._used_uuids: set[Optional[int]] = set()

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
        """TorchFT 0.2's entry point: joins the group at ``store_addr``
        (``host:port/prefix``, a new prefix for every quorum) as ``rank`` of
        ``world_size``. Every member must call this for the same ``store_addr``.
        Forms the group as described in :meth:`_form`."""
        formation = from_configure(store_addr, rank, world_size, quorum_id, global_ranks)
        with self._lock:
            self._replica_id = replica_id
            self._group_rank = group_rank
            self._group_world_size = group_world_size
        self._form(formation)

    def set_rank_info(
        self,
        replica_id: str,
        group_rank: int,
        group_world_size: int,
        global_rank: Optional[int] = None,
    ) -> None:
        """TorchFT 0.3: this member's identity; ``global_rank`` goes into its
        reconfigure handle."""
        with self._lock:
            self._replica_id = replica_id
            self._group_rank = group_rank
            self._group_world_size = group_world_size
            self._global_rank = global_rank

    def _handle_id(self) -> str:
        # TorchFT's _rendezvous finds a member's rank by this id.
        return self._id

    def get_reconfigure_handle(self) -> str:
        """TorchFT 0.3: this member's handle (JSON), naming the rendezvous store
        this process group hosts; the same across reconfigures."""
        with self._lock:
            if self._hosted_store is None:  # binds a port; waits for no peer
                self._hosted_store = TCPStore(
                    host_name=advertised_host(), port=0, is_master=True, wait_for_workers=False
                )
            store = self._hosted_store
            global_rank = self._global_rank
        return make_handle(self._id, store.host, store.port, global_rank)

    def reconfigure(self, opts: Any) -> Work:
        """TorchFT 0.3's entry point: forms the group of the members whose
        handles ``opts.handles`` lists, in that order (a set: ordered by handle),
        under ``opts.uuid``, which must be new to this process group, within
        ``opts.timeout`` (default: this group's timeout). Returns completed
        work; failures raise.

        Handles that are malformed, empty, or do not include this group's own
        raise ``ValueError`` and leave the group as it was.
        """
        formation = from_reconfigure(opts, self._id)
        with self._lock:
            if formation.formation_id in self._used_uuids:
                raise ValueError(
                    f"ProcessGroupMonarch.reconfigure: uuid {formation.formation_id} was used before by this "
                    "process group; every reconfigure needs a fresh uuid"
                )
            self._used_uuids.add(formation.formation_id)
        self._form(formation)
        return _completed_work()

    def _form(self, formation: Formation) -> None:
        """Forms the group that ``formation`` asks for.

        Reuses this process group's endpoint when it has one: links to peers
        that are the same processes as in the previous quorum stay up, and only
        new members are connected. The previous group is released afterwards.
        Raises a ``MonarchError`` naming the request, rank and world size when
        the group cannot be formed within the timeout; the process group is
        then unusable (``errored()`` returns the error) until a later request
        succeeds. The endpoint is kept for that, unless requests on it failed
        twice in a row: then the next starts on a fresh one.
        """
        dropped = None
        with self._lock:
            previous = self._backend
            if previous is not None and self._failed_reconfigures >= _MAX_FAILED_RECONFIGURES:
                # Requests on the kept endpoint failed again and again: start afresh.
                dropped, previous, self._backend = previous, None, None
            self._pg = None  # no op may start on the group being replaced
            self._formation = formation
            timeout = formation.timeout if formation.timeout is not None else self._timeout
            op_timeout = self._op_timeout

        if dropped is not None:
            logger.warning("dropping the endpoint after %d failed requests", self._failed_reconfigures)
            dropped.abort()
        rank, world_size = formation.rank, formation.world_size
        reused = previous is not None
        try:
            store = self._stores.prefixed(formation.store_addr, timeout)
            if previous is not None:
                backend = previous.reconfigure(store, rank, world_size, formation.group_name)
            else:
                backend = new_backend(store, rank, world_size, formation.group_name, timeout, self._options)
            if op_timeout is not None:
                # set_timeout() applies to this group as to the previous one.
                backend.set_timeout(op_timeout)
            pg = _wrap_backend(store, rank, world_size, backend)
        except Exception as e:
            error = _formation_error(e, formation, reused)
            logger.warning("%s", error)
            self._stores.forget(formation.store_addr)
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
            "%s: rank %d/%d (%s) connections=%d",
            formation.request,
            rank,
            world_size,
            "reconfigured" if reused else "new endpoint",
            backend.connection_count(),
        )
        if previous is not None:
            _release(previous)

    def abort(self) -> None:
        """Fails every pending op with ``AbortedError`` at once and releases the
        endpoint; never blocks on peers. ``errored()`` reports the abort and
        the next group is formed on a fresh endpoint."""
        with self._lock:
            backend, self._backend, self._pg = self._backend, None, None
            self._error = AbortedError(f"ProcessGroupMonarch rank {self._rank} was aborted")
        if backend is not None:
            logger.info("aborting rank %d", self._rank)
            backend.abort()

    def shutdown(self) -> None:
        """Releases the endpoint in order: queued ops finish first (each bounded
        by its timeout) and peers are told goodbye rather than seeing a
        failure. The process group may form a group again afterwards."""
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
        ops started from now on use it, in this group and in those formed
        later, and so does the next rendezvous that sets no timeout itself."""
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
                f"ProcessGroupMonarch rank {self._rank} has no usable group until a new one is formed: {error}",
                getattr(error, "failed_ranks", ()),
            )
        raise RuntimeError(
            "ProcessGroupMonarch: process group not initialized; TorchFT's Manager forms it "
            "(configure() in TorchFT 0.2, reconfigure() in 0.3)"
        )

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(rank={self._rank}, size={self._world_size}, "
            f"request={self._formation.request if self._formation else None}, replica_id={self._replica_id!r})"
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


def _completed_work() -> Work:
    future: torch.futures.Future[None] = torch.futures.Future()
    future.set_result(None)
    # torch 2.13's type stubs lack this binding (2.14's declare it).
    return torch._C._distributed_c10d._create_work_from_future(future)  # type: ignore[attr-defined,no-any-return]


def _formation_error(error: Exception, formation: Formation, reused: bool) -> MonarchError:
    how = "reconfigure from the previous group" if reused else "new endpoint"
    message = (
        f"ProcessGroupMonarch.{formation.request} failed: rank {formation.rank} of {formation.world_size}, "
        f"store {formation.store_addr!r} ({how}): {error}"
    )
    if isinstance(error, MonarchError):
        return type(error)(message, error.failed_ranks)
    return MonarchError(message)
