"""Ways to start a monarch job: a real torchrun launch (env://), and
init_process_group with tcp://, file:// and env:// init methods."""

from __future__ import annotations

import os
import sys
from datetime import timedelta
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

import torch_monarch  # noqa: F401 - registers "monarch" in the worker processes
from commands import run_bounded
from multiproc import WorkerContext, free_port, run_workers_ok

SCRIPT = Path(__file__).resolve().parent / "scripts" / "launch_check.py"
TORCHRUN_TIMEOUT_S = 120


def test_torchrun_env_init(repo_env: dict[str, str]) -> None:
    command = [
        sys.executable, "-m", "torch.distributed.run",
        "--standalone", "--nproc-per-node", "2", "--max-restarts", "0",
        str(SCRIPT),
    ]
    result = run_bounded(command, TORCHRUN_TIMEOUT_S, {**repo_env, "OMP_NUM_THREADS": "1"})
    assert result.returncode == 0, result.stdout
    for rank in range(2):
        assert f"LAUNCH_OK {rank}" in result.stdout, result.stdout


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
