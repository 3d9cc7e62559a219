"""Run by test_launch.py under plain torchrun with --max-restarts: a training
loop of allreduces over "monarch" where rank 1 exits with status 3 at step 10
of the first attempt. Every rank that finishes an attempt prints
"RESTART_DONE attempt=<n> rank=<r>"."""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from datetime import timedelta

import torch
import torch.distributed as dist

import torch_monarch  # noqa: F401 - registers the backend

STEPS = 20
CRASH_RANK = 1
CRASH_STEP = 10
_PR_SET_PDEATHSIG = 1


def main() -> int:
    # Workers run in sessions of their own: die with the agent, whatever kills it.
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
    dist.init_process_group(backend="monarch", timeout=timedelta(seconds=30))
    rank, world = dist.get_rank(), dist.get_world_size()
    for step in range(STEPS):
        if attempt == 0 and rank == CRASH_RANK and step == CRASH_STEP:
            os._exit(3)
        tensor = torch.full((256,), float(rank + 1 + step))
        dist.all_reduce(tensor)
        expected = float(sum(r + 1 + step for r in range(world)))
        assert torch.all(tensor == expected), (step, tensor[:4], expected)
    dist.barrier()
    dist.destroy_process_group()
    print(f"RESTART_DONE attempt={attempt} rank={rank}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
