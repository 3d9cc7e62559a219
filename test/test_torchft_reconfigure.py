"""ProcessGroupMonarch through TorchFT 0.3's entry points: set_rank_info,
get_reconfigure_handle and reconfigure(opts).

Ranks are threads of this process, each with its own endpoint. Checked:
ranks follow the order of the handles; links to the same processes are kept
across reconfigures; bad handles and a reused uuid raise a clear
``ValueError`` and leave the group as it was; a member that never arrives
fails the reconfigure within its timeout, and a fresh uuid recovers.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any, Callable

import pytest
import torch
import torch.distributed as dist
from torch.distributed import TCPStore

from pg_formation import reconfigure_options
from torch_monarch.errors import MonarchError
from torch_monarch.torchft import ProcessGroupMonarch

pytestmark = [pytest.mark.timeout(90), pytest.mark.newest_stack]


def _parallel(pgs: list[ProcessGroupMonarch], fn: Callable[[ProcessGroupMonarch], Any]) -> list[Any]:
    with ThreadPoolExecutor(max_workers=len(pgs)) as pool:
        futures = [pool.submit(fn, pg) for pg in pgs]
        return [future.result(timeout=60) for future in futures]


def _reconfigure(members: list[ProcessGroupMonarch], uuid: int, timeout: timedelta = timedelta(seconds=20)) -> None:
    """Every member reconfigures with the handles of ``members``, in that order."""
    handles = [pg.get_reconfigure_handle() for pg in members]
    _parallel(members, lambda pg: pg.reconfigure(reconfigure_options(uuid, handles, timeout)).wait())


def _sum_of_ranks_plus_one(pg: ProcessGroupMonarch) -> float:
    t = torch.full((3,), float(pg.rank() + 1))
    pg.allreduce([t], dist.ReduceOp.SUM).wait()
    return t[0].item()


@pytest.fixture
def pgs() -> Any:
    groups = [ProcessGroupMonarch(timeout=timedelta(seconds=20)) for _ in range(3)]
    for index, pg in enumerate(groups):
        pg.set_rank_info(f"replica_{index}", 0, 1, index)
    yield groups
    for pg in groups:
        pg.shutdown()


def test_ranks_follow_handle_order_and_links_survive(pgs: list[ProcessGroupMonarch]) -> None:
    a, b, c = pgs
    _reconfigure([c, a, b], uuid=1)
    assert [pg.rank() for pg in (c, a, b)] == [0, 1, 2]
    assert all(pg.size() == 3 for pg in pgs)
    assert _parallel(pgs, _sum_of_ranks_plus_one) == [6.0] * 3
    assert [pg.connection_count() for pg in pgs] == [2, 2, 2]

    # Shrink to a and c: no link is opened (the ones to b, which is alive, stay up).
    _reconfigure([a, c], uuid=2)
    assert (a.rank(), c.rank(), a.size()) == (0, 1, 2)
    assert _parallel([a, c], _sum_of_ranks_plus_one) == [3.0, 3.0]
    assert [a.connection_count(), c.connection_count()] == [2, 2]

    # b rejoins over the links it has: none is added.
    _reconfigure([a, b, c], uuid=3)
    assert [pg.rank() for pg in pgs] == [0, 1, 2]
    assert _parallel(pgs, _sum_of_ranks_plus_one) == [6.0] * 3
    assert [pg.connection_count() for pg in pgs] == [2, 2, 2]


def test_a_set_of_handles_gives_every_member_the_same_ranks(pgs: list[ProcessGroupMonarch]) -> None:
    handles = {pg.get_reconfigure_handle() for pg in pgs}
    _parallel(pgs, lambda pg: pg.reconfigure(reconfigure_options(5, set(handles), timedelta(seconds=20))).wait())
    assert sorted(pg.rank() for pg in pgs) == [0, 1, 2]
    assert _parallel(pgs, _sum_of_ranks_plus_one) == [6.0] * 3


def test_handle_is_stable_and_names_a_store_and_the_global_rank(pgs: list[ProcessGroupMonarch]) -> None:
    handle = pgs[2].get_reconfigure_handle()
    assert pgs[2].get_reconfigure_handle() == handle
    peer = json.loads(handle)
    assert peer["global_rank"] == 2 and peer["id"] == pgs[2]._handle_id()
    host, _, port = peer["store"].rpartition(":")
    TCPStore(host, int(port), is_master=False, wait_for_workers=False, timeout=timedelta(seconds=5)).set("probe", "1")
    assert len({pg.get_reconfigure_handle() for pg in pgs}) == 3


def _bad_requests(pgs: list[ProcessGroupMonarch]) -> list[tuple[str, Any, str]]:
    """(what, options, the error it must raise) for rank 0 of a formed group of pgs[0:2]."""
    own, peer = pgs[0].get_reconfigure_handle(), pgs[1].get_reconfigure_handle()
    stranger = pgs[2].get_reconfigure_handle()
    gloo_style = json.dumps({"id": "x", "store": "localhost:1", "global_rank": None})
    timeout = timedelta(seconds=1)
    return [
        ("empty", reconfigure_options(10, [], timeout), "handle list is empty"),
        ("not JSON", reconfigure_options(11, [own, "garbage"], timeout), "handle 1 is not a reconfigure handle"),
        ("JSON but not an object", reconfigure_options(12, [own, "[1]"], timeout), "handle 1 is not a reconfigure handle"),
        ("another group's handle", reconfigure_options(13, [own, gloo_style], timeout), "handle 1 is not ProcessGroupMonarch's"),
        ("without this rank (another job)", reconfigure_options(14, [peer, stranger], timeout), "handle .* is not among the 2 handles"),
        ("a handle twice", reconfigure_options(15, [own, own], timeout), "appears more than once"),
        ("reused uuid", reconfigure_options(1, [own, peer], timeout), "uuid 1 was used before"),
    ]


def test_bad_input_raises_clearly_and_keeps_the_group(pgs: list[ProcessGroupMonarch]) -> None:
    a, b = pgs[0], pgs[1]
    _reconfigure([a, b], uuid=1)
    connections = a.connection_count()
    for what, opts, message in _bad_requests(pgs):
        with pytest.raises(ValueError, match=message):
            a.reconfigure(opts)
        assert a.errored() is None, what
        assert (a.rank(), a.size(), a.connection_count()) == (0, 2, connections), what
        assert _parallel([a, b], _sum_of_ranks_plus_one) == [3.0, 3.0], what


def test_member_that_never_arrives_fails_in_time_and_a_fresh_uuid_recovers(pgs: list[ProcessGroupMonarch]) -> None:
    a, b, c = pgs
    _reconfigure([a, b], uuid=1)
    handles = [a.get_reconfigure_handle(), b.get_reconfigure_handle(), c.get_reconfigure_handle()]
    # c never reconfigures.
    opts = reconfigure_options(2, handles, timedelta(seconds=1))
    with pytest.raises(MonarchError, match=r"reconfigure\(uuid=2\) failed: rank [01] of 3") as info:
        _parallel([a, b], lambda pg: pg.reconfigure(opts).wait())
    assert isinstance(info.value, dist.DistBackendError)
    assert all(isinstance(pg.errored(), MonarchError) for pg in (a, b))
    # The next quorum, with a fresh uuid, forms on the kept link.
    _reconfigure([a, b], uuid=3)
    assert [a.errored(), b.errored()] == [None, None]
    assert _parallel([a, b], _sum_of_ranks_plus_one) == [3.0, 3.0]
    assert [a.connection_count(), b.connection_count()] == [1, 1]
