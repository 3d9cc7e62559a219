"""Worker-side group setup shared by the collective tests."""

from __future__ import annotations

from datetime import timedelta

import pytest
import torch.distributed as dist

import torch_monarch
from multiproc import WorkerContext
from rdma_support import RDMA_ENV, requires_rdma

# Chunk size of the "direct" and "ring" groups: a 1023-element op splits into
# several chunks per rank block for every dtype.
TINY_CHUNK_BYTES = 512

# The collective suites run once per transport: "auto" with its defaults
# (large payloads between processes on one host by remote read or shared
# memory), "shm" (every collective that can through shared memory, in rounds
# of a few elements, so that every op crosses many of them), "tcp" (every
# byte over TCP) and "rdma" (every rank poses as a host of its own, and every
# non-empty payload goes by RDMA read through libfabric's tcp provider
# on loopback; skipped where libfabric cannot be loaded).
TRANSPORTS = ["auto", "shm", "tcp", pytest.param("rdma", marks=requires_rdma)]

_TRANSPORT_ENVS = {
    "auto": {"MONARCH_TRANSPORT": "auto"},
    "shm": {"MONARCH_TRANSPORT": "auto", "MONARCH_SHM_MIN_BYTES": "0", "MONARCH_SHM_SEGMENT_BYTES": "4096"},
    "tcp": {"MONARCH_TRANSPORT": "tcp"},
    "rdma": {**RDMA_ENV, "MONARCH_HOST_NAME": "host{rank}", "MONARCH_RDMA_MIN_BYTES": "1"},
}


def transport_env(transport: str) -> dict[str, str]:
    """Worker environment that makes every monarch group use ``transport``."""
    return dict(_TRANSPORT_ENVS[transport])


def default_and_ring_groups(ctx: WorkerContext, timeout: timedelta = timedelta(seconds=60)) -> dict[str, dist.ProcessGroup]:
    """Initialises the default monarch group and returns it with two all-rank
    groups that take the chunked bandwidth algorithms at every size (no
    small-message path): all-pairs ("direct") and around a ring ("ring")."""
    ctx.init("monarch", timeout=timeout)
    direct = dist.new_group(
        backend="monarch",
        pg_options=torch_monarch.Options(small_message_bytes=0, chunk_bytes=TINY_CHUNK_BYTES),
    )
    ring = dist.new_group(
        backend="monarch",
        pg_options=torch_monarch.Options(small_message_bytes=0, chunk_bytes=TINY_CHUNK_BYTES, direct_max_ranks=0),
    )
    return {"default": dist.group.WORLD, "direct": direct, "ring": ring}
