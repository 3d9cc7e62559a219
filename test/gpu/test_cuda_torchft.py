"""ProcessGroupMonarch on CUDA tensors, formed through either TorchFT generation's entry point.

Three ranks are threads of this process, each with its own endpoint, all on
GPU 0 (ranks that share a GPU take the host-staged route). Checked with the
installed TorchFT (0.2.0 or the nightly): the values of the collectives that
TorchFT's Manager, DDP, DiLoCo and PGTransport use; a quorum change that keeps
the links; a dead peer failing the step with its rank named.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any, Callable

import pytest
import torch
import torch.distributed as dist
from torch.distributed import TCPStore
from torch.distributed.distributed_c10d import AllgatherOptions, ReduceScatterOptions

from pg_formation import form
from torch_monarch.errors import PeerFailureError
from torch_monarch.torchft import ProcessGroupMonarch

pytestmark = [pytest.mark.cuda, pytest.mark.timeout(120)]

ENTRY_POINTS = ["configure", "reconfigure"]


def _on_ranks(pgs: list[ProcessGroupMonarch], fn: Callable[[ProcessGroupMonarch, int], Any]) -> list[Any]:
    with ThreadPoolExecutor(max_workers=len(pgs)) as pool:
        futures = [pool.submit(fn, pg, rank) for rank, pg in enumerate(pgs)]
        return [future.result(timeout=60) for future in futures]


def _form_all(pgs: list[ProcessGroupMonarch], entry: str, store: TCPStore, formation: int) -> None:
    prefix = f"cuda-{entry}-{formation}"
    _on_ranks(pgs, lambda pg, rank: form(pg, entry, store.port, prefix, rank, len(pgs), formation))


def _collectives(pg: ProcessGroupMonarch, rank: int) -> dict[str, Any]:
    world = pg.size()
    device = torch.device("cuda", 0)
    summed = torch.full((1024,), float(rank + 1), device=device)
    pg.allreduce([summed], dist.ReduceOp.SUM).wait()
    root_value = torch.full((7,), float(rank * 10), device=device)
    pg.broadcast_one(root_value, root=1).wait()
    gathered = [torch.empty(3, device=device) for _ in range(world)]
    pg.allgather([gathered], [torch.full((3,), float(rank), device=device)], AllgatherOptions()).wait()
    scattered = torch.empty(2, device=device)
    inputs = [torch.full((2,), float(rank + peer), device=device) for peer in range(world)]
    pg.reduce_scatter([scattered], [inputs], ReduceScatterOptions()).wait()
    # PGTransport's tagged point-to-point: rank r sends to r+1.
    received = torch.empty(5, device=device)
    send = pg.send([torch.full((5,), float(rank), device=device)], (rank + 1) % world, tag=3)
    pg.recv([received], (rank - 1) % world, tag=3).wait()
    send.wait()
    torch.cuda.synchronize()
    return {
        "sum": summed.unique().tolist(),
        "broadcast": root_value.unique().tolist(),
        "gathered": [t.unique().item() for t in gathered],
        "scattered": scattered.unique().tolist(),
        "received": received.unique().tolist(),
    }


@pytest.fixture
def store() -> Any:
    yield TCPStore("localhost", 0, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=30))


@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_collectives_on_cuda_tensors_through_a_quorum_change(entry: str, store: TCPStore) -> None:
    pgs = [ProcessGroupMonarch(timeout=timedelta(seconds=20)) for _ in range(3)]
    try:
        _form_all(pgs, entry, store, formation=1)
        results = _on_ranks(pgs, _collectives)
        for rank, result in enumerate(results):
            assert result["sum"] == [6.0]
            assert result["broadcast"] == [10.0]
            assert result["gathered"] == [0.0, 1.0, 2.0]
            # Rank r's block: sum over senders s of (s + r).
            assert result["scattered"] == [float(3 * rank + 3)]
            assert result["received"] == [float((rank - 1) % 3)]
        links = [pg.connection_count() for pg in pgs]

        # The next quorum drops the last rank: the survivors keep their links.
        survivors = pgs[:2]
        _form_all(survivors, entry, store, formation=2)
        assert [pg.connection_count() for pg in survivors] == links[:2]
        assert [r["sum"] for r in _on_ranks(survivors, _collectives)] == [[3.0], [3.0]]
    finally:
        for pg in pgs:
            pg.shutdown()


@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_an_aborted_peer_fails_the_step_naming_it(entry: str, store: TCPStore) -> None:
    pgs = [ProcessGroupMonarch(timeout=timedelta(seconds=20)) for _ in range(3)]
    try:
        _form_all(pgs, entry, store, formation=1)
        pgs[2].abort()  # its links close, as a dead process's would

        def step(pg: ProcessGroupMonarch, rank: int) -> BaseException:
            tensor = torch.ones(1 << 20, device="cuda")
            with pytest.raises(PeerFailureError) as caught:
                pg.allreduce([tensor], dist.ReduceOp.SUM).wait()
            return caught.value

        for error in _on_ranks(pgs[:2], step):
            assert 2 in error.failed_ranks
        assert all(isinstance(pg.errored(), PeerFailureError) for pg in pgs[:2])
    finally:
        for pg in pgs:
            pg.shutdown()
