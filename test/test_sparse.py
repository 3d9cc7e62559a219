"""SUM allreduce of sparse COO CPU tensors, compared with Gloo's in the same
processes (coalesced indices, summed values), and DDP over a sparse
embedding, which relies on it, training like DDP over Gloo."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from multiproc import WorkerContext, run_workers_ok

TIMEOUT = timedelta(seconds=60)


def _coo(indices: torch.Tensor, values: torch.Tensor, size: tuple[int, ...]) -> torch.Tensor:
    return torch.sparse_coo_tensor(indices, values, size, check_invariants=True)


def _sparse_input(rank: int, case: str) -> torch.Tensor:
    """Rank-dependent entries that overlap across ranks, duplicates included."""
    if case == "empty_on_rank_0" and rank == 0:
        return _coo(torch.empty((1, 0), dtype=torch.long), torch.empty((0, 3)), (10, 3))
    if case == "matrix":
        indices = torch.tensor([[0, rank, 5, rank], [1, 2, rank, 2]])
        return _coo(indices, torch.tensor([1.0, 2.0, 3.0, 4.0]) * (rank + 1), (8, 8))
    if case == "int64":
        indices = torch.tensor([[rank % 3, 4, rank % 3]])
        return _coo(indices, torch.tensor([10, 20, 30]) * (rank + 1), (6,))
    # Embedding-like: rows of a (10, 3) table, one sparse dimension.
    indices = torch.tensor([[rank, 7, rank + 1, 7]])
    values = torch.arange(12, dtype=torch.float32).reshape(4, 3) + rank
    return _coo(indices, values, (10, 3))


CASES = ["rows", "matrix", "int64", "empty_on_rank_0"]


def sparse_worker(ctx: WorkerContext) -> dict[str, Any]:
    ctx.init("monarch", timeout=TIMEOUT)
    gloo = dist.new_group(backend="gloo")
    out: dict[str, Any] = {}
    for case in CASES:
        results = {}
        for name, group in (("monarch", dist.group.WORLD), ("gloo", gloo)):
            tensor = _sparse_input(ctx.rank, case)
            work = dist.all_reduce(tensor, group=group, async_op=True)
            work.wait()
            (future_value,) = work.get_future().value()
            results[name] = (tensor, future_value)
        (mine, future_value), (theirs, _) = results["monarch"], results["gloo"]
        out[case] = {
            "coalesced": mine.is_coalesced(),
            "indices_equal": torch.equal(mine._indices(), theirs.coalesce()._indices()),
            "values_equal": torch.equal(mine._values(), theirs.coalesce()._values()),
            "dense_equal": torch.equal(mine.to_dense(), theirs.to_dense()),
            "future_is_result": torch.equal(future_value.to_dense(), mine.to_dense()),
            "dense": mine.to_dense().tolist(),
        }
    try:
        dist.all_reduce(_sparse_input(ctx.rank, "rows"), op=dist.ReduceOp.MAX)
        out["max"] = "no error"
    except ValueError as error:
        out["max"] = f"ValueError: {error}"
    # The group is still healthy after the refused call.
    tensor = torch.ones(2)
    dist.all_reduce(tensor)
    out["after"] = tensor.tolist()
    return out


@pytest.mark.parametrize("world_size", [2, 3])
def test_sparse_allreduce_equals_gloo(world_size: int) -> None:
    results = run_workers_ok(sparse_worker, world_size, timeout=120)
    for rank, result in enumerate(results):
        for case in CASES:
            got = result[case]
            assert got["coalesced"], (rank, case, got)
            assert got["indices_equal"] and got["values_equal"] and got["dense_equal"], (rank, case, got)
            assert got["future_is_result"], (rank, case, got)
            # The same on every rank, and the dense sum of the inputs.
            expected = sum(_sparse_input(r, case).to_dense() for r in range(world_size))
            assert got["dense"] == expected.tolist(), (rank, case, got)
        assert result["max"].startswith("ValueError") and "SUM" in result["max"], result["max"]
        assert result["after"] == [float(world_size)] * 2


class _SparseModel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(7)
        self.embedding = nn.Embedding(50, 8, sparse=True)
        self.head = nn.Linear(8, 1)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.embedding(ids).mean(dim=1))


def ddp_sparse_worker(ctx: WorkerContext) -> dict[str, Any]:
    ctx.init("monarch", timeout=TIMEOUT)
    gloo = dist.new_group(backend="gloo")
    trained = {}
    for name, group in (("monarch", dist.group.WORLD), ("gloo", gloo)):
        model = DistributedDataParallel(_SparseModel(), process_group=group)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
        for step in range(6):
            generator = torch.Generator().manual_seed(100 * step + ctx.rank)
            ids = torch.randint(0, 50, (4, 5), generator=generator)
            target = torch.randn(4, 1, generator=generator)
            optimizer.zero_grad()
            nn.functional.mse_loss(model(ids), target).backward()
            optimizer.step()
        trained[name] = {k: v.detach().clone() for k, v in model.module.state_dict().items()}
    initial = _SparseModel().state_dict()
    return {
        "max_diff": max((trained["monarch"][k] - trained["gloo"][k]).abs().max().item() for k in initial),
        "embedding_moved": not torch.equal(trained["monarch"]["embedding.weight"], initial["embedding.weight"]),
        "embedding": trained["monarch"]["embedding.weight"],
    }


def test_ddp_with_a_sparse_embedding_trains_like_gloo() -> None:
    results = run_workers_ok(ddp_sparse_worker, 2, timeout=120)
    for result in results:
        assert result["max_diff"] < 1e-6, result["max_diff"]
        assert result["embedding_moved"]
    assert torch.equal(results[0]["embedding"], results[1]["embedding"])
