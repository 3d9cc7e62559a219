"""Every survivor names the rank that died, also a survivor that hears of it
only after another survivor has given up on the group and closed its links.

Three ranks. Rank 0 stops itself (SIGSTOP) while it streams a large isend to
rank 1, so it hears of nothing until it is resumed. Rank 1 kills rank 2,
sees its own all_reduce fail naming rank 2, aborts the group (closing its
sockets, as TorchFT's manager does on an error) and resumes rank 0. Rank 0
then finds its link to rank 1 closed, with rank 1's error notice (naming
rank 2) still unread in front of the close, and rank 2's link closed too.
Whichever it looks at first, its pending send to rank 1 and its next
collective must fail with PeerFailureError naming rank 2: rank 1 only left
because rank 2 died.

The same with the data the other way, through the remote read of one host:
rank 0 stops with a large irecv posted, rank 1 sends (a descriptor of its
buffer), kills rank 2, aborts and frees the buffer. Rank 0's read of it then
fails, before rank 0 has read the notice behind the descriptor; its receive
must still name rank 2.
"""

from __future__ import annotations

import gc
import os
import signal
from datetime import timedelta
from typing import Any

import pytest
import torch
import torch.distributed as dist

from faults import Outcome, attempt, backend_of, kill_and_wait, process_state, wait_until
from monarch_groups import transport_env
from multiproc import WorkerContext, run_workers

# Far more than a loopback link moves while rank 0 stops itself: the send is
# still streaming when it stops.
STREAM_BYTES = 256 << 20
VICTIM = 2


def _expect_victim_named(what: str, outcome: Outcome, problems: list[str]) -> None:
    if not outcome.is_a("PeerFailureError") or outcome.failed_ranks != (VICTIM,):
        problems.append(f"{what}: expected PeerFailureError naming [{VICTIM}], {outcome.describe()}")


def attribution_worker(ctx: WorkerContext, case: str) -> list[str]:
    """``case`` "stream": rank 0 stops while sending to rank 1; "freed": rank 0
    stops with a receive posted, and rank 1 sends, then frees its buffer."""
    ctx.init("monarch", timeout=timedelta(seconds=30))
    store = ctx.store()
    store.set(f"pid/{ctx.rank}", str(os.getpid()))
    dist.barrier()
    problems: list[str] = []
    if ctx.rank == 0:
        if case == "stream":
            pending = dist.isend(torch.ones(STREAM_BYTES // 4), 1)  # rank 1 buffers it as it comes
        else:
            pending = dist.irecv(torch.empty(STREAM_BYTES // 4), 1)
        os.kill(os.getpid(), signal.SIGSTOP)  # rank 1 resumes it
        _expect_victim_named(f"the {case} op with the rank that aborted", attempt(pending.wait), problems)
        _expect_victim_named("the next all_reduce", attempt(lambda: dist.all_reduce(torch.ones(4))), problems)
    elif ctx.rank == 1:
        slow = int(store.get("pid/0"))
        wait_until(lambda: process_state(slow) == "T", 30, "rank 0 to stop itself")
        if case == "freed":
            # Sent while rank 0 is stopped: it reads the descriptor only once resumed.
            buffer = torch.ones(STREAM_BYTES // 4)
            sending = dist.isend(buffer, 0)
        kill_and_wait(int(store.get(f"pid/{VICTIM}")))
        _expect_victim_named("the all_reduce", attempt(lambda: dist.all_reduce(torch.ones(4))), problems)
        backend_of(dist.group.WORLD).abort()
        if case == "freed":
            attempt(sending.wait)  # failed by the abort
            # The last references: the allocator gives the pages back to the system.
            del sending, buffer
            gc.collect()
        os.kill(slow, signal.SIGCONT)
    else:
        dist.recv(torch.empty(1), 0)  # never sent: this rank is killed waiting
    return problems


@pytest.mark.parametrize(
    ("case", "transport"),
    # "freed" needs the remote read of one host, which "tcp" does not use.
    [("stream", "tcp"), ("stream", "auto"), ("freed", "auto")],
)
def test_survivor_that_aborted_is_not_blamed(case: str, transport: str) -> None:
    # Rank 0's stop must not be what the others detect.
    env = {**transport_env(transport), "MONARCH_HEARTBEAT_TIMEOUT": "60"}
    results = run_workers(attribution_worker, 3, case, timeout=90, env=env)
    assert results[VICTIM].exit_code == -signal.SIGKILL, results[VICTIM]
    for result in results[:VICTIM]:
        assert result.ok, f"rank {result.rank}: {result}"
        assert not result.value, f"rank {result.rank}: {result.value}"
