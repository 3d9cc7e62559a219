"""A supervised worker for the supervision tests: allreduce steps on the monarch backend.

``--fail KIND`` makes rank ``--fail-rank`` fail at step ``--fail-step`` of the
first attempt only (``always`` in ``--fail-attempts`` fails every attempt):
``exc`` raises, ``exit`` exits with code 7, ``segv`` segfaults, ``hang``
stops itself (SIGSTOP), ``comm`` aborts the process group.
"""

import argparse
import ctypes
import os
import signal
import sys
import time

import torch
import torch.distributed as dist

import torch_monarch  # noqa: F401
from torch_monarch import supervision


def fail_here(kind: str) -> None:
    if kind == "exc":
        raise ValueError("planned failure in fail_here")
    if kind == "exit":
        sys.stderr.flush()
        os._exit(7)
    if kind == "segv":
        ctypes.string_at(0)
    if kind == "hang":
        os.kill(os.getpid(), signal.SIGSTOP)
    if kind == "comm":
        dist.distributed_c10d._get_default_group().abort()


@supervision.supervised
def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--fail", default="")
    parser.add_argument("--fail-rank", type=int, default=1)
    parser.add_argument("--fail-step", type=int, default=5)
    parser.add_argument("--fail-attempts", default="first", choices=["first", "always"])
    parser.add_argument("--step-time", type=float, default=0.0, help="seconds of (simulated) compute per step")
    parser.add_argument("--fail-replica", default="", help="only this replica fails (default: every replica)")
    args = parser.parse_args()
    ctx = supervision.worker_context()
    dist.init_process_group("monarch")
    failing = args.fail and ctx.rank == args.fail_rank and (args.fail_attempts == "always" or ctx.restart_count == 0)
    failing = failing and args.fail_replica in ("", ctx.replica_id)
    for step in range(args.steps):
        if failing and step == args.fail_step:
            fail_here(args.fail)
        t = torch.ones(4) * (dist.get_rank() + 1)
        dist.all_reduce(t)
        assert t[0].item() == sum(range(1, dist.get_world_size() + 1))
        supervision.report_progress(step)
        time.sleep(args.step_time)  # stands in for a step's compute
    supervision.report_progress(args.steps, state="done")
    print(f"rank {ctx.rank} attempt {ctx.restart_count} done", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
