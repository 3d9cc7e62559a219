"""Worker-side group setup shared by the collective tests."""

from __future__ import annotations

from datetime import timedelta

import torch.distributed as dist

import torch_monarch
from multiproc import WorkerContext

# Chunk size of the "ring" group: a 1023-element op splits into several
# chunks per rank block for every dtype.
TINY_CHUNK_BYTES = 512


def default_and_ring_groups(ctx: WorkerContext, timeout: timedelta = timedelta(seconds=60)) -> dict[str, dist.ProcessGroup]:
    """Initialises the default monarch group and returns it with a second
    all-rank group whose options force the chunked ring algorithms at every
    size (no small-message path)."""
    ctx.init("monarch", timeout=timeout)
    ring = dist.new_group(
        backend="monarch",
        pg_options=torch_monarch.Options(small_message_bytes=0, chunk_bytes=TINY_CHUNK_BYTES),
    )
    return {"default": dist.group.WORLD, "ring": ring}
