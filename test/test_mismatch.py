"""Ranks that disagree about the op at one sequence number: every rank gets a
CollectiveMismatchError naming that op, well within the group timeout (never
a hang, a crash or a wrong tensor) -- from the op itself, or, for a rank that
had finished its part, from the next op -- and the group stays broken
afterwards while other groups keep working."""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Callable

import pytest
import torch
import torch.distributed as dist

from multiproc import WorkerContext, run_workers_ok

# The mismatched groups' timeout; errors must come well before it.
GROUP_TIMEOUT = timedelta(seconds=10)
BOUND_S = 5.0

# What a call returned (it must raise instead).
Result = torch.Tensor


@dataclass(frozen=True)
class Outcome:
    """What one rank saw from one call."""

    raised: bool
    class_names: tuple[str, ...] = ()
    message: str = ""
    elapsed_s: float = 0.0

    def describe(self) -> str:
        if not self.raised:
            return f"returned after {self.elapsed_s:.2f} s"
        return f"raised {self.class_names[0]} after {self.elapsed_s:.2f} s: {self.message[:300]}"


def _attempt(call: Callable[[], Result]) -> Outcome:
    start = time.monotonic()
    try:
        call()
    except Exception as error:  # noqa: BLE001 - the parent judges the type
        return Outcome(True, tuple(c.__name__ for c in type(error).__mro__), str(error), time.monotonic() - start)
    return Outcome(False, elapsed_s=time.monotonic() - start)


def _valid_op(group: dist.ProcessGroup) -> Result:
    tensor = torch.ones(4)
    dist.all_reduce(tensor, group=group)
    return tensor


def _mine(rank: int, numel: int = 10, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.full((numel,), rank + 1, dtype=dtype)


def _all_reduce(rank: int, group: dist.ProcessGroup, tensor: torch.Tensor, op: Any = dist.ReduceOp.SUM) -> Result:
    dist.all_reduce(tensor, op=op, group=group)
    return tensor


def _broadcast(rank: int, group: dist.ProcessGroup, tensor: torch.Tensor, root: int) -> Result:
    dist.broadcast(tensor, src=root, group=group)
    return tensor


def _all_gather(rank: int, group: dist.ProcessGroup) -> Result:
    output = torch.empty(10 * group.size())
    dist.all_gather_into_tensor(output, _mine(rank), group=group)
    return output


def _reduce_scatter(rank: int, group: dist.ProcessGroup) -> Result:
    output = torch.empty(10)
    dist.reduce_scatter_tensor(output, _mine(rank, 10 * group.size()), group=group)
    return output


def _reduce(rank: int, group: dist.ProcessGroup, tensor: torch.Tensor, root: int) -> Result:
    dist.reduce(tensor, dst=root, group=group)
    return tensor


def _gather(rank: int, group: dist.ProcessGroup, tensor: torch.Tensor, root: int) -> Result:
    outputs = [torch.empty_like(tensor) for _ in range(group.size())] if rank == root else None
    dist.gather(tensor, gather_list=outputs, dst=root, group=group)
    return tensor


def _scatter(rank: int, group: dist.ProcessGroup, tensor: torch.Tensor, root: int) -> Result:
    inputs = [tensor.clone() for _ in range(group.size())] if rank == root else None
    dist.scatter(tensor, scatter_list=inputs, src=root, group=group)
    return tensor


def _all_to_all_splits(rank: int, group: dist.ProcessGroup, rows: int) -> Result:
    """Rank 0 sends rank 1 one row more than rank 1 expects from it (and
    itself one fewer), with the same number of rows in as everyone."""
    n = group.size()
    send = [rows] * n
    recv = [rows] * n
    if rank == 0:
        send[0] -= 1
        send[1] += 1
        recv[0] -= 1
    output = torch.empty(sum(recv), 2)
    dist.all_to_all_single(
        output, torch.ones(rows * n, 2), output_split_sizes=recv, input_split_sizes=send, group=group
    )
    return output


# The rooted ops, each with a root argument (group rank 0 is global rank 0).
ROOTED: dict[str, Callable[[int, dist.ProcessGroup, torch.Tensor, int], Result]] = {
    "broadcast": _broadcast,
    "reduce": _reduce,
    "gather": _gather,
    "scatter": _scatter,
}


def _rooted_cases() -> dict[str, Callable[[int, dist.ProcessGroup], Result]]:
    """Every rooted op with ranks disagreeing on the root (rank 0 the root in
    its own view, so a pure sender or receiver, then the others naming rank
    0), on the size and on the dtype; small (trees, direct) and 1.2 MB (on
    one host, shared memory where the op has it); and on sizes that take
    different paths."""
    cases: dict[str, Callable[[int, dist.ProcessGroup], Result]] = {}
    for name, op in ROOTED.items():
        for label, numel in (("", 10), ("_large", 300_000)):
            cases[f"{name}_root{label}"] = lambda rank, g, op=op, numel=numel: op(
                rank, g, _mine(rank, numel), 0 if rank == 0 else 1
            )
            cases[f"{name}_root_other{label}"] = lambda rank, g, op=op, numel=numel: op(
                rank, g, _mine(rank, numel), 1 if rank == 0 else 0
            )
            cases[f"{name}_size{label}"] = lambda rank, g, op=op, numel=numel: op(
                rank, g, _mine(rank, numel + (rank == 0)), 0
            )
            cases[f"{name}_dtype{label}"] = lambda rank, g, op=op, numel=numel: op(
                rank, g, _mine(rank, numel, torch.float32 if rank == 0 else torch.int32), 1
            )
        # Sizes on either side of the shared-memory threshold: rank 0 takes
        # the link path, the others meet in shared memory, which no frame
        # of rank 0's reaches unless it is checked on arrival.
        cases[f"{name}_size_paths"] = lambda rank, g, op=op: op(rank, g, _mine(rank, 10 if rank == 0 else 300_000), 1)
    return cases


# Each case: the op rank `rank` calls at the group's first sequence number.
# Rank 0 disagrees with the others, who agree among themselves.
CASES: dict[str, Callable[[int, dist.ProcessGroup], Result]] = {
    "size": lambda rank, g: _all_reduce(rank, g, _mine(rank, 10 if rank == 0 else 20)),
    "size_zero": lambda rank, g: _all_reduce(rank, g, _mine(rank, 0 if rank == 0 else 10)),
    # The others meet in shared memory, where no frame moves.
    "size_zero_large": lambda rank, g: _all_reduce(rank, g, _mine(rank, 0 if rank == 0 else 300_000)),
    "size_large": lambda rank, g: _all_reduce(rank, g, _mine(rank, 300_000 + (rank == 0))),
    "dtype": lambda rank, g: _all_reduce(rank, g, _mine(rank, dtype=torch.float32 if rank == 0 else torch.int32)),
    "reduce_op": lambda rank, g: _all_reduce(
        rank, g, _mine(rank), dist.ReduceOp.SUM if rank == 0 else dist.ReduceOp.MAX
    ),
    "allreduce_vs_broadcast": lambda rank, g: (
        _all_reduce(rank, g, _mine(rank)) if rank == 0 else _broadcast(rank, g, _mine(rank), 0)
    ),
    "broadcast_vs_allreduce": lambda rank, g: (
        _broadcast(rank, g, _mine(rank), 0) if rank == 0 else _all_reduce(rank, g, _mine(rank))
    ),
    "broadcast_root": lambda rank, g: _broadcast(rank, g, _mine(rank), 0 if rank == 0 else 1),
    # 100 KB: past the small-message tree, below shared memory (the chain).
    "broadcast_root_chain": lambda rank, g: _broadcast(rank, g, _mine(rank, 25_000), 0 if rank == 0 else 1),
    "allgather_vs_reduce_scatter": lambda rank, g: _all_gather(rank, g) if rank == 0 else _reduce_scatter(rank, g),
    # Blocks that two ranks size differently: in one round, and (5.6 MB a
    # block) in several.
    "all_to_all_splits": lambda rank, g: _all_to_all_splits(rank, g, 4),
    "all_to_all_splits_rounds": lambda rank, g: _all_to_all_splits(rank, g, 700_000),
    **_rooted_cases(),
}


def mismatch_worker(ctx: WorkerContext, case_names: list[str]) -> dict[str, tuple[Outcome, Outcome]]:
    """For each case, on a fresh group: the mismatched op, then a valid op."""
    ctx.init("monarch", timeout=timedelta(seconds=60))
    outcomes: dict[str, tuple[Outcome, Outcome]] = {}
    for name in case_names:
        group = dist.new_group(backend="monarch", timeout=GROUP_TIMEOUT)
        mismatched = _attempt(lambda: CASES[name](ctx.rank, group))
        later = _attempt(lambda: _valid_op(group))
        outcomes[name] = (mismatched, later)
        # Other groups are unaffected.
        tensor = torch.ones(4)
        dist.all_reduce(tensor)
        assert tensor.tolist() == [float(ctx.world_size)] * 4, tensor
    return outcomes


def _assert_mismatch_error(outcome: Outcome, where: str) -> None:
    assert outcome.raised, f"{where}: {outcome.describe()}"
    assert "CollectiveMismatchError" in outcome.class_names, f"{where}: {outcome.describe()}"
    assert "DistBackendError" in outcome.class_names, f"{where}: {outcome.describe()}"
    # The group's first op is sequence number 1: the error names it, even
    # when it comes from the op after it.
    assert "mismatch at sequence number 1:" in outcome.message, f"{where}: {outcome.describe()}"
    assert outcome.elapsed_s < BOUND_S, f"{where}: {outcome.describe()}"


def _rooted_op_of(case: str) -> str | None:
    op = case.split("_")[0]
    return op if op in ROOTED else None


# At world 2, the cases in which each rank only waits for data from the
# other: with no data frame moving, the ranks' announcements
# (Links::announce) are all that can reveal the mismatch, in the op.
WAIT_FOR_EACH_OTHER = {"broadcast_root_other", "scatter_root_other", "gather_root", "reduce_root"}


@pytest.mark.parametrize("world_size", [2, 3])
def test_mismatch_raises_on_every_rank(world_size: int) -> None:
    """Every rank raises CollectiveMismatchError naming the mismatched op:
    from the op itself when it is still in it once the mismatch is seen (a
    rank that waits for data always is), else -- a rank that only sent, or
    received all it expected before the disagreeing frame arrived -- from
    the group's next op. Nothing hangs, and the op after the mismatch fails
    on every rank."""
    names = list(CASES)
    per_rank = run_workers_ok(mismatch_worker, world_size, names, timeout=240)
    problems = []
    for name in names:
        raised_in_op = 0
        for rank, outcomes in enumerate(per_rank):
            mismatched, later = outcomes[name]
            where = f"rank {rank} case {name}"
            try:
                first_error = mismatched if mismatched.raised else later
                _assert_mismatch_error(first_error, where)
                if (op := _rooted_op_of(name)) is not None:
                    assert op in first_error.message, f"{where}: does not name {op}: {first_error.describe()}"
                assert later.raised and "DistBackendError" in later.class_names, (
                    f"{where}: the op after the mismatch {later.describe()}"
                )
                raised_in_op += mismatched.raised
            except AssertionError as error:
                problems.append(str(error).split("\n")[0])
        if world_size == 2 and name in WAIT_FOR_EACH_OTHER and raised_in_op != world_size:
            problems.append(f"case {name}: {raised_in_op} of {world_size} ranks raised in the op itself")
    assert not problems, "\n".join(problems)
