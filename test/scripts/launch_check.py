"""Run by test_launch.py under torchrun: a plain training-script style init
("monarch" backend, env:// rendezvous from torchrun's environment), a few
collectives checked against known values, and "LAUNCH_OK <rank>" on success.
"""

from __future__ import annotations

import os
import sys

import torch
import torch.distributed as dist

import torch_monarch  # noqa: F401 - registers the backend


def main() -> int:
    dist.init_process_group(backend="monarch")
    rank, world = dist.get_rank(), dist.get_world_size()
    assert rank == int(os.environ["RANK"]) and world == int(os.environ["WORLD_SIZE"])
    assert dist.get_backend() == "monarch", dist.get_backend()

    tensor = torch.arange(1000, dtype=torch.float32) * (rank + 1)
    dist.all_reduce(tensor)
    torch.testing.assert_close(tensor, torch.arange(1000, dtype=torch.float32) * sum(range(1, world + 1)))

    gathered = [torch.empty(3, dtype=torch.int64) for _ in range(world)]
    dist.all_gather(gathered, torch.full((3,), rank, dtype=torch.int64))
    assert [int(t[0]) for t in gathered] == list(range(world)), gathered

    payload = torch.tensor([42.0, -1.0]) if rank == world - 1 else torch.zeros(2)
    dist.broadcast(payload, src=world - 1)
    torch.testing.assert_close(payload, torch.tensor([42.0, -1.0]))

    dist.barrier()
    dist.destroy_process_group()
    print(f"LAUNCH_OK {rank}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
