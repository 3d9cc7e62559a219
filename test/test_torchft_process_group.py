"""TorchFT's generic process-group checks, run against ProcessGroupMonarch.

Uses the installed TorchFT's own helpers (0.2.0 or the nightly) from
``torchft.process_group_test``: ``_test_pg`` (every collective's shapes and
futures), the ``run_*_test`` value checks and the ``MultiPgBaseTest``
harness (ranks on threads of this process) with its resiliency scenario.
Unlike TorchFT's Gloo group, no collective is skipped.
"""

from __future__ import annotations

import re
from datetime import timedelta
from types import TracebackType
from typing import Any, List, Optional

import pytest
import torch
import torch.distributed as dist
import torchft.process_group_test as tft
from parameterized import parameterized
from torch import nn
from torch._C._distributed_c10d import _resolve_process_group
from torch.distributed import TCPStore
from torchft.process_group import ProcessGroup

from torch_monarch.errors import PeerFailureError
from torch_monarch.torchft import ProcessGroupMonarch

pytestmark = [pytest.mark.timeout(60), pytest.mark.newest_stack]


def _store() -> TCPStore:
    return TCPStore(host_name="localhost", port=0, is_master=True, wait_for_workers=False)


class _ExpectRankLeft:
    """Stands in for one of the scenario's ``assertRaisesRegex`` blocks.

    TorchFT's resiliency scenario matches the message texts of Gloo and NCCL
    ("Connection closed by peer", "timed out after", ... and "aborted" for
    ``errored()``). Monarch raises a typed ``PeerFailureError`` naming the
    rank that left instead, so that is what this requires. As in the scenario,
    an op that did not involve the rank that left may succeed ("no error").
    """

    def __init__(self, test: "MonarchMultiPgTest", allow_no_error: bool) -> None:
        self._test = test
        self._allow_no_error = allow_no_error

    def __enter__(self) -> "_ExpectRankLeft":
        return self

    def __exit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> bool:
        if exc is None:
            self._test.fail("expected the op to fail after a rank left the group")
        if self._allow_no_error and type(exc) is RuntimeError and str(exc) == "no error":
            return True
        fault_rank = self._test.WORLD_SIZE - 1
        if not isinstance(exc, PeerFailureError):
            return False  # propagates the unexpected error as it is
        self._test.assertIn(fault_rank, exc.failed_ranks, str(exc))
        self._test.assertIn(f"rank {fault_rank}", str(exc))
        return True


class MonarchMultiPgTest(tft.MultiPgBaseTest):
    BACKEND = "monarch"
    WORLD_SIZE = 3
    # Nothing skipped: TorchFT's Gloo group skips alltoall_base and both reduce_scatters.
    COLLECTIVES: List[str] = list(tft._ALL_COLLECTIVES)

    @classmethod
    def _create_pg(cls, backend: str) -> ProcessGroup:
        assert backend == "monarch"
        return ProcessGroupMonarch(timeout=timedelta(seconds=10))

    @parameterized.expand(COLLECTIVES)
    def test_collective(self, collective: str) -> None:
        self._run_parallel(collective, device="cpu")

    @parameterized.expand(COLLECTIVES)
    def test_collective_with_resiliency(self, collective: str) -> None:
        self._run_with_resiliency(collective, device="cpu")

    def assertRaisesRegex(self, expected_exception: Any, expected_regex: Any, *args: Any, **kwargs: Any) -> Any:
        pattern = getattr(expected_regex, "pattern", expected_regex)
        if not args and not kwargs and isinstance(pattern, str):
            if "Connection closed by peer" in pattern:  # the op run after the last rank left
                return _ExpectRankLeft(self, allow_no_error=True)
            if pattern == "aborted":  # what errored() returned after that op
                return _ExpectRankLeft(self, allow_no_error=False)
        return super().assertRaisesRegex(expected_exception, expected_regex, *args, **kwargs)

    def test_rank_and_size(self) -> None:
        for rank, pg in enumerate(self.pg_pool):
            self.assertEqual(pg.rank(), rank)
            self.assertEqual(pg.size(), self.WORLD_SIZE)
            self.assertEqual(dist.get_world_size(pg), self.WORLD_SIZE)
            self.assertEqual(pg.getBackendName(), "torchft-monarch")


def _run_ranks(pgs: List[ProcessGroupMonarch], fn: Any, *args: Any) -> List[Any]:
    """Runs ``fn(pg, rank, *args)`` for every rank on its own thread."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=len(pgs)) as pool:
        futures = [pool.submit(fn, pg, rank, *args) for rank, pg in enumerate(pgs)]
        return [future.result(timeout=30) for future in futures]


def _configure(pg: ProcessGroupMonarch, rank: int, store_addr: str, world_size: int, quorum_id: int) -> None:
    pg.configure(store_addr, "0", rank, world_size, quorum_id=quorum_id)


def test_single_rank_apis_and_ddp() -> None:
    # Same as TorchFT's test_gloo_apis, minus its skips.
    store = _store()
    pg = ProcessGroupMonarch(timeout=timedelta(seconds=10))
    try:
        pg.configure(f"localhost:{store.port}/prefix", "0", 0, 1)
        assert pg.size() == 1 and pg.rank() == 0
        works = tft._test_pg(pg, torch.tensor([2]))
        assert set(works) == _TEST_PG_COLLECTIVES
        model = nn.parallel.DistributedDataParallel(nn.Linear(3, 4), process_group=pg)
        model(torch.rand(2, 3)).sum().backward()
    finally:
        pg.shutdown()


# Every collective _test_pg runs (all but send/recv); none may be skipped.
_TEST_PG_COLLECTIVES = {
    "allreduce",
    "allreduce_coalesced",
    "allgather",
    "allgather_into_tensor_coalesced",
    "alltoall_base",
    "barrier",
    "broadcast",
    "broadcast_one",
    "reduce_scatter",
    "reduce_scatter_tensor_coalesced",
}


def _reduce_scatter_values(pg: ProcessGroupMonarch, rank: int) -> torch.Tensor:
    # torchft's run_reduce_scatter_test returns early on CPU (Gloo lacks it), so check values here.
    world = pg.size()
    inputs = [torch.full((3,), float(10 * rank + chunk)) for chunk in range(world)]
    output = torch.empty(3)
    opts = dist.ReduceScatterOptions()
    opts.reduceOp = dist.ReduceOp.SUM
    pg.reduce_scatter([output], [inputs], opts).wait()
    return output


def test_reduce_scatter_values_on_cpu() -> None:
    store = _store()
    pgs = [ProcessGroupMonarch(timeout=timedelta(seconds=10)) for _ in range(3)]
    try:
        _run_ranks(pgs, _configure, f"localhost:{store.port}/rs", 3, 1)
        outputs = _run_ranks(pgs, _reduce_scatter_values)
        for rank, output in enumerate(outputs):
            # sum over ranks r of (10 r + rank) = 30 + 3 rank
            torch.testing.assert_close(output, torch.full((3,), 30.0 + 3 * rank))
    finally:
        for pg in pgs:
            pg.shutdown()


def test_functional_collectives_after_register() -> None:
    # Same as TorchFT's test_functional_collectives: register() makes the group
    # resolvable by name for functional collectives and DeviceMesh.
    created_default = not dist.is_initialized()
    tft.dummy_init_pg()
    store = _store()
    pg = ProcessGroupMonarch(timeout=timedelta(seconds=10)).register("monarch_func_col")
    try:
        pg.configure(f"localhost:{store.port}/prefix", "0", 0, 1)
        assert pg.group_name == str(dist.get_pg_count() - 1)
        assert _resolve_process_group(pg.group_name) is pg
        t = torch.arange(10, dtype=torch.float32)
        out = dist._functional_collectives.all_reduce(t, "sum", pg)
        torch.testing.assert_close(out, torch.arange(10, dtype=torch.float32))
    finally:
        pg.unregister()
        if created_default:
            dist.destroy_process_group()


def test_configure_failure_is_clear_and_recoverable() -> None:
    store = _store()
    pg = ProcessGroupMonarch(timeout=timedelta(seconds=0.5))
    with pytest.raises(dist.DistBackendError, match=r"configure\(quorum_id=7\) failed: rank 0 of 2") as info:
        # rank 1 never comes
        pg.configure(f"localhost:{store.port}/lonely", "0", 0, 2, quorum_id=7)
    assert pg.errored() is info.value
    with pytest.raises(dist.DistBackendError, match="no usable group"):
        pg.allreduce([torch.zeros(1)], dist.ReduceOp.SUM)
    # The next quorum's configure works.
    pg.configure(f"localhost:{store.port}/alone", "0", 0, 1, quorum_id=8)
    assert pg.errored() is None
    t = torch.ones(2)
    pg.allreduce([t], dist.ReduceOp.SUM).wait()
    torch.testing.assert_close(t, torch.ones(2))
    pg.shutdown()


def test_collective_before_configure_raises() -> None:
    pg = ProcessGroupMonarch()
    with pytest.raises(RuntimeError, match="process group not initialized"):
        pg.allreduce([torch.zeros(1)], dist.ReduceOp.SUM)
    assert pg.errored() is None


def test_pg_transport_checkpoint_round_trip() -> None:
    # TorchFT's PGTransport heals a replica over the group with tagged send/recv.
    from torchft.checkpointing.pg_transport import PGTransport

    store = _store()
    pgs = [ProcessGroupMonarch(timeout=timedelta(seconds=10)) for _ in range(2)]
    state: dict[str, Any] = {
        "weight": torch.randn(64, 33),
        "ids": torch.arange(1000, dtype=torch.int64),
        "half": torch.randn(17, dtype=torch.bfloat16),
        "column": torch.randn(6, 4)[:, 1],  # strided view
        "nested": {"flags": torch.tensor([True, False, True]), "lr": 0.5},
        "step": 12,
    }
    timeout = timedelta(seconds=10)

    def transfer(pg: ProcessGroupMonarch, rank: int) -> Any:
        transport = PGTransport(pg, timeout=timeout, device=torch.device("cpu"))
        if rank == 0:
            transport.send_checkpoint(dst_ranks=[1], step=3, state_dict=state, timeout=timeout)
            return None
        return transport.recv_checkpoint(src_rank=0, metadata=transport.metadata(), step=3, timeout=timeout)

    try:
        _run_ranks(pgs, _configure, f"localhost:{store.port}/transport", 2, 1)
        received = _run_ranks(pgs, transfer)[1]
        torch.testing.assert_close(received, state)
    finally:
        for pg in pgs:
            pg.shutdown()
