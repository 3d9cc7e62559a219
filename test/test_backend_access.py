"""The public way to a monarch group's own API: ``torch_monarch.backend_of``
and ``torch_monarch.group_error`` (no ``pg._get_backend``): a healthy group
has no error, a group broken by a skipped op reports a typed error naming the
skipper, ``reconfigure`` rebuilds it on the same links, and a non-monarch
group is a TypeError."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
import torch
import torch.distributed as dist

import torch_monarch
from multiproc import WorkerContext, run_workers_ok

pytestmark = pytest.mark.timeout(120)

OP_TIMEOUT = timedelta(seconds=2)
STORE_WAIT = timedelta(seconds=60)


def access_worker(ctx: WorkerContext) -> dict[str, Any]:
    ctx.init("monarch", timeout=timedelta(seconds=60))
    store = ctx.store()
    result: dict[str, Any] = {"backend": type(torch_monarch.backend_of()).__name__}
    result["healthy_error"] = torch_monarch.group_error()
    gloo = dist.new_group(backend="gloo")
    try:
        torch_monarch.backend_of(gloo)
        result["gloo"] = "no error"
    except TypeError as e:
        result["gloo"] = f"TypeError: {e}"

    group = dist.new_group(backend="monarch", timeout=OP_TIMEOUT)
    if ctx.rank == 0:
        try:
            dist.all_reduce(torch.ones(4), group=group)
        except dist.DistBackendError:
            pass
        store.set("timed_out", "1")
    else:
        store.wait(["timed_out"], STORE_WAIT)
    error = torch_monarch.group_error(group) if ctx.rank == 0 else None
    result["broken_error"] = (type(error).__name__, error.failed_ranks) if error is not None else None

    # A new membership through the public backend: the same two processes, on the links they hold.
    rebuilt = torch_monarch.backend_of(group).reconfigure(dist.PrefixStore("rebuilt", store), ctx.rank, 2, "rebuilt")
    tensor = torch.full((4,), float(ctx.rank + 1))
    rebuilt.allreduce([tensor]).wait()
    result["rebuilt_sum"] = tensor.tolist()
    result["rebuilt_error"] = rebuilt.error_info()
    rebuilt.shutdown()
    dist.destroy_process_group()
    return result


def test_backend_of_and_group_error() -> None:
    results = run_workers_ok(access_worker, 2)
    for rank, result in enumerate(results):
        assert result["backend"] == "MonarchBackend"
        assert result["healthy_error"] is None
        assert result["gloo"].startswith("TypeError") and "ProcessGroupGloo" in result["gloo"], result["gloo"]
        assert result["rebuilt_sum"] == [3.0] * 4 and result["rebuilt_error"] is None
    assert results[0]["broken_error"] == ("CollectiveTimeoutError", [1])
