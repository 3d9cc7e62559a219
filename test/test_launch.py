"""Ways to start a monarch job: a real torchrun launch (env://), and
init_process_group with tcp://, file:// and env:// init methods."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

import torch_monarch  # noqa: F401 - registers "monarch" in the worker processes
from multiproc import WorkerContext, free_port, run_workers_ok

REPO_ROOT = Path(__file__).resolve().parent.parent
SCRIPT = Path(__file__).resolve().parent / "scripts" / "launch_check.py"
TORCHRUN_TIMEOUT_S = 120


def _run_bounded(command: list[str], env: dict[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
    """Runs `command` in its own session; on timeout kills that whole session
    (torchrun and the workers it started) and fails."""
    process = subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    try:
        output, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        pytest.fail(f"{command} did not finish within {timeout} s; output:\n{output}")
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    return subprocess.CompletedProcess(command, process.returncode, output, None)


def test_torchrun_env_init() -> None:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["OMP_NUM_THREADS"] = "1"
    command = [
        sys.executable, "-m", "torch.distributed.run",
        "--standalone", "--nproc-per-node", "2", "--max-restarts", "0",
        str(SCRIPT),
    ]
    result = _run_bounded(command, env, TORCHRUN_TIMEOUT_S)
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
