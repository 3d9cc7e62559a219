"""Ways to start a monarch job: a real torchrun launch (env://), and
init_process_group with tcp://, file:// and env:// init methods."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

import torch_monarch  # also registers "monarch" in the worker processes
from commands import repo_env, run_bounded
from faults import C10D_TIMEOUT_PATTERN
from multiproc import WorkerContext, free_port, run_workers_ok

SCRIPT = Path(__file__).resolve().parent / "scripts" / "launch_check.py"
TORCHRUN_TIMEOUT_S = 120
RESTART_SCRIPT = Path(__file__).resolve().parent / "scripts" / "restart_train.py"
# Two attempts of 20 steps plus torchrun's restart; the bound also holds
# when a restarted group could not form (its 30 s timeout, then an error).
RESTART_TIMEOUT_S = 180


def _torchrun(script: Path, nproc: int, max_restarts: int, timeout: float) -> subprocess.CompletedProcess[str]:
    """Plain `torchrun --standalone` (the agent's store shared by the workers
    across restarts), bounded by `timeout`."""
    env = repo_env({"OMP_NUM_THREADS": "1"})
    env.pop("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", None)
    command = [
        sys.executable, "-m", "torch.distributed.run",
        "--standalone", "--nproc-per-node", str(nproc), "--max-restarts", str(max_restarts),
        str(script),
    ]
    return run_bounded(command, timeout, env)


def test_torchrun_env_init() -> None:
    result = _torchrun(SCRIPT, nproc=2, max_restarts=0, timeout=TORCHRUN_TIMEOUT_S)
    assert result.returncode == 0, result.stdout
    for rank in range(2):
        assert f"LAUNCH_OK {rank}" in result.stdout, result.stdout


def test_torchrun_restart_after_a_worker_exits() -> None:
    """Plain torchrun, the agent's store shared across restarts: rank 1 exits
    at step 10 of the first attempt, and the restarted attempt, keyed apart
    from the first one's rendezvous, completes on every rank."""
    result = _torchrun(RESTART_SCRIPT, nproc=3, max_restarts=2, timeout=RESTART_TIMEOUT_S)
    assert result.returncode == 0, result.stdout
    done = set(re.findall(r"RESTART_DONE attempt=(\d+) rank=(\d+)", result.stdout))
    # The first attempt lost rank 1, so nobody finished it; the second did, on every rank.
    assert done == {("1", str(rank)) for rank in range(3)}, result.stdout


@pytest.mark.parametrize("rank", [0, 1])
def test_a_group_that_cannot_form_raises_within_its_timeout(rank: int) -> None:
    """The peer never comes: rank 0 waits for it to connect, rank 1 for rank
    0's token in the store. Either raises a typed error at the group's 2 s
    timeout, not at the store's own (300 s)."""
    from torch_monarch.backend import new_backend

    store = dist.TCPStore("127.0.0.1", 0, is_master=True, timeout=timedelta(seconds=300), wait_for_workers=False)
    started = time.monotonic()
    with pytest.raises(torch_monarch.PeerFailureError, match=C10D_TIMEOUT_PATTERN) as info:
        new_backend(store, rank, 2, f"lonely_{rank}", timedelta(seconds=2))
    elapsed = time.monotonic() - started
    assert 1.5 < elapsed < 5.0, f"raised after {elapsed:.1f} s: {info.value}"
    assert f"rank {rank} could not join group" in str(info.value)


def init_method_worker(ctx: WorkerContext, init_method: str) -> list[float]:
    """init_process_group("monarch", init_method=...) and one all_reduce."""
    dist.init_process_group(
        backend="monarch",
        init_method=init_method,
        rank=ctx.rank,
        world_size=ctx.world_size,
        timeout=timedelta(seconds=60),
    )
    assert dist.get_backend() == "monarch"
    tensor = torch.full((5,), float(ctx.rank + 1))
    dist.all_reduce(tensor)
    return tensor.tolist()


def env_init_worker(ctx: WorkerContext, port: int) -> list[float]:
    """env:// with MASTER_ADDR/MASTER_PORT/RANK/WORLD_SIZE in the environment."""
    os.environ.update(
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(ctx.rank), WORLD_SIZE=str(ctx.world_size)
    )
    return init_method_worker(ctx, "env://")


@pytest.mark.parametrize("scheme", ["tcp", "file"])
def test_init_method(scheme: str, tmp_path: Path) -> None:
    if scheme == "tcp":
        init_method = f"tcp://127.0.0.1:{free_port()}"
    else:
        init_method = f"file://{tmp_path / 'rendezvous'}"
    values = run_workers_ok(init_method_worker, 3, init_method)
    assert values == [[6.0] * 5] * 3


def test_env_init() -> None:
    values = run_workers_ok(env_init_worker, 2, free_port())
    assert values == [[3.0] * 5] * 2
