"""Configuration of monarch process groups.

Every field can be overridden from the environment by ``MONARCH_<FIELD>``
(upper case; durations in seconds, e.g. ``MONARCH_HEARTBEAT_TIMEOUT=1.5``),
which wins over the value set in code, so that a launcher can tune a job
without touching the training script (``torch_monarch._env`` reads them).

Precedence of a setting, highest first:

1. a call at run time: ``set_timeout()`` on a group's backend or on
   ``ProcessGroupMonarch`` sets the op timeout of the ops that start after
   it (on ``ProcessGroupMonarch`` also of the groups of later configures);
2. the ``MONARCH_<FIELD>`` environment variable;
3. the ``Options`` field set in code (``pg_options=``, ``options=``);
4. the group's own argument, for the op timeout only:
   ``init_process_group(timeout=)``, ``new_group(timeout=)`` or
   ``ProcessGroupMonarch(timeout=)``; then the field's default.

Every default is defined here and nowhere else: the C++ side takes each
value from the resolved ``Options`` (``BackendOptions`` has no defaults of
its own), and the README's Options table is checked against these
(test/test_options.py).

Adding an option: a field here (type, default, a line in the docstring and
in ``validate``, a row in the README's table), the member of the same name
in camelCase and its line in ``BackendOptions::forEachField``
(csrc/backend/options.h), and the C++ code that uses it. The environment
override, the binding and the check that both sides list the same fields
(test/test_options.py) follow from those.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Optional

from torch_monarch._config import Config

__all__ = ["Options"]

# A round moves half a segment; this leaves room for a piece of every rank's
# block of the widest dtype in groups of up to 128 ranks.
_MIN_SHM_SEGMENT_BYTES = 4096

GPU_TRANSPORTS = ("auto", "nccl", "host")
TRANSPORTS = ("auto", "tcp", "rdma")
CROSS_MEMORY_OPS = ("allreduce", "all", "off")


@dataclass
class Options(Config):
    """``pg_options`` for ``init_process_group``/``new_group`` with backend "monarch".

    Attributes:
        timeout: per-op timeout; ``None`` takes the group's timeout.
        heartbeat_timeout: silence after which a peer is declared failed
            (dead, stopped, deadlocked or cut off); a number is read as
            seconds. Heartbeats go out every fifth of it. The default of 3 s
            rides out scheduler stalls on a loaded host yet turns a hung peer
            into an error in seconds, minutes before any op timeout would.
        transport: "auto" lets processes on one host move large payloads
            through shared memory: collectives among a group's ranks on the
            host through segments in /dev/shm (see ``shm_min_bytes``), other
            transfers by a single-copy remote read (process_vm_readv); the
            rest goes over TCP. "tcp" sends every byte over TCP (no shared
            memory of either kind). "rdma" is "auto" with large payloads
            to peers on other hosts read by RDMA (libfabric's fi_read into the
            posted tensor; the TCP link keeps the handshake, control frames
            and heartbeats); creating the group raises
            ``RdmaUnavailableError`` when libfabric or a provider is missing.
            "auto" takes RDMA between hosts too where the machine has an RDMA
            device (/sys/class/infiniband) and its provider opens (or where
            ``rdma_provider`` is set and opens), never within one host.
        bind_address: address peers use to reach this process; empty picks
            the address the host name resolves to, else loopback.
        small_message_bytes: messages up to this size use latency-optimal
            algorithms (recursive doubling, binomial trees).
        chunk_bytes: pipelining chunk of the bandwidth-optimal algorithms.
        direct_max_ranks: groups up to this size reduce-scatter and
            allgather large messages with every peer at once (one dependent
            step); larger groups go around a ring (n-1 steps, one neighbour
            each way). 0 always takes the ring.
        threads: threads that reduce and copy large messages, the group's
            worker included (the helpers start at the first op large
            enough to use them). ``None`` takes ``torch.get_num_threads()``
            when the group forms, and at least 2 where the CPUs this process
            may use (its affinity mask, capped by its cgroup's CPU quota, a
            container's CPU limit) number at least two for each of the
            group's ranks on its host: one thread's copy is bound by its core, not by memory,
            so at torchrun's one thread per rank a second one moved 16-64 MB
            messages 1.2-2.3x faster on a 16-core host, and a host with
            fewer cores than that is not oversubscribed.
            ``torch_monarch.backend_of(group).threads`` says what a group
            took.
        host_name: the host this process counts as. Empty: the machine it
            runs on. Ranks on one host share memory for large payloads, and
            allreduce across several hosts first reduces within each host.
            Set it per process to make one machine pose as several hosts
            (tests, trying out a multi-host layout).
        shm_min_bytes: collectives of at least this many bytes go through
            shared memory when every rank of the group runs on one host:
            every allreduce, reduce, reduce-scatter, allgather, broadcast,
            gather and alltoall, and a scatter in a group of two or one
            that fits half a segment (a larger one's receivers read their
            blocks out of the root's memory); across hosts, so do the
            within-host phases of an allreduce that reduces within each host
            first. The default 0 takes every size there: a 4 KB op through
            shared memory waits for no wake-up of a peer's threads, and took
            a third to a sixth of its time over the links on a 16-core host.
        cross_memory: which ops of 1 MiB or more on one host, on tensors not
            from ``allocate_tensor``, read and write the peers' tensors
            where they lie with the kernel's cross-memory copies
            (process_vm_readv / process_vm_writev) instead of copying
            through the segments: "allreduce" (default; 1.3-1.9x faster
            at 1-64 MB on a 2-core machine), "all" (the reduce-scatter and
            allgather too, which were 0.63-1.36x there: the segments'
            extra copies stay in the cache, and the kernel copies slower
            than memcpy), "off". Where the kernel refuses it (Yama's
            ``kernel.yama.ptrace_scope`` of 1 or more, a process that is
            not dumpable) they go through the segments.
        shm_segment_bytes: the shared-memory segment each rank that shares
            its host with others of the group maps, at the first op that
            goes through it (``shm_min_bytes`` or more). Larger ops go
            through it in rounds of half of it. Its name leaves /dev/shm as
            soon as the peers have mapped it, so nothing is left there when
            a job ends or is killed; its pages are reserved up front, so a
            /dev/shm too small for every rank's segment makes the group's
            ranks on that host fall back to their links instead of failing.
        gpu_transport: the route of CUDA tensors. "nccl": NCCL (RCCL on
            ROCm) on the GPU. "host": host-staged, each op copies its CUDA
            tensors into pinned host memory on a stream of its own, runs the
            host algorithms (shared memory included) and copies the results
            back, ordered on the CUDA streams. "auto" (default) takes NCCL
            unless two ranks of the group share a GPU (which NCCL refuses)
            or some rank cannot load NCCL; the ranks tell each other their
            GPU's UUID at the group's first op on CUDA tensors.
        rdma_provider: the libfabric provider of the RDMA transport, as
            ``fi_info -p`` names it ("verbs;ofi_rxm", "efa", "tcp;ofi_rxm"
            for a software one on any network). Empty: verbs, else efa.
        rdma_min_bytes: payloads to peers on other hosts of at least this
            many bytes go by RDMA read; smaller ones inline on TCP, where one
            send beats a registration, a descriptor and an acknowledgement.
        enable_reconfigure: make the group in c10d's reconfigure regime
            (torch >= 2.14), as ``init_process_group(enable_reconfigure=True)``
            does; for ``new_group``, which has no such argument. The group is
            a group of one until ``dist._reconfigure`` (or TorchFT's Manager)
            forms it from the members' ``get_reconfigure_handle()`` strings.
        job: the job a reconfigurable group belongs to: it takes handles
            from processes of the same job only. Empty: ``TORCHFT_LIGHTHOUSE``
            when set (the replicas of one TorchFT job share their
            Lighthouse), else the processes that created the group together
            (its rank 0 draws a token in the group's store).
    """

    timeout: Optional[timedelta] = None
    heartbeat_timeout: timedelta = timedelta(seconds=3)
    transport: str = "auto"
    bind_address: str = ""
    small_message_bytes: int = 64 * 1024
    chunk_bytes: int = 512 * 1024
    direct_max_ranks: int = 8
    threads: Optional[int] = None
    host_name: str = ""
    shm_min_bytes: int = 0
    cross_memory: str = "allreduce"
    shm_segment_bytes: int = 8 * 1024 * 1024
    gpu_transport: str = "auto"
    rdma_provider: str = ""
    rdma_min_bytes: int = 256 * 1024
    enable_reconfigure: bool = False
    job: str = ""

    def with_env_overrides(self) -> "Options":
        """Returns a validated copy with ``MONARCH_*`` environment variables applied."""
        resolved = super().with_env_overrides()
        resolved.validate()
        return resolved

    def validate(self) -> None:
        if self.timeout is not None and self.timeout.total_seconds() <= 0:
            raise ValueError(f"Options.timeout must be positive, got {self.timeout}")
        if self.heartbeat_timeout.total_seconds() <= 0:
            raise ValueError(f"Options.heartbeat_timeout must be positive, got {self.heartbeat_timeout}")
        if self.transport not in TRANSPORTS:
            raise ValueError(f"Options.transport must be one of {TRANSPORTS}, got {self.transport!r}")
        if self.cross_memory not in CROSS_MEMORY_OPS:
            raise ValueError(f"Options.cross_memory must be one of {CROSS_MEMORY_OPS}, got {self.cross_memory!r}")
        if self.gpu_transport not in GPU_TRANSPORTS:
            raise ValueError(f"Options.gpu_transport must be one of {GPU_TRANSPORTS}, got {self.gpu_transport!r}")
        if self.small_message_bytes < 0:
            raise ValueError(f"Options.small_message_bytes must be >= 0, got {self.small_message_bytes}")
        if self.chunk_bytes <= 0:
            raise ValueError(f"Options.chunk_bytes must be positive, got {self.chunk_bytes}")
        if self.threads is not None and self.threads < 1:
            raise ValueError(f"Options.threads must be >= 1, got {self.threads}")
        if self.shm_min_bytes < 0:
            raise ValueError(f"Options.shm_min_bytes must be >= 0, got {self.shm_min_bytes}")
        if self.shm_segment_bytes < _MIN_SHM_SEGMENT_BYTES:
            raise ValueError(
                f"Options.shm_segment_bytes must be at least {_MIN_SHM_SEGMENT_BYTES}, got {self.shm_segment_bytes}"
            )
        if self.rdma_min_bytes < 0:
            raise ValueError(f"Options.rdma_min_bytes must be >= 0, got {self.rdma_min_bytes}")
        if self.direct_max_ranks < 0:
            raise ValueError(f"Options.direct_max_ranks must be >= 0, got {self.direct_max_ranks}")

