"""Replica mode of ``monarch-run``: one replica's agent on this host.

``python -m torch_monarch.run --replica-id 2 --lighthouse ADDR ... train.py``
is what a scheduler runs for each replica (the orchestrator builds the
command with :func:`~torch_monarch.launch.embedded.agent_args`). It is torchrun's agent for this
replica's workers (same rendezvous, environment, log handling), supervised
by a :class:`ReplicaSupervisor`.
"""

from __future__ import annotations

import argparse
import logging
import os
import uuid

from torch_monarch.launch.args import hang_config, restart_policy, sync_env
from torch_monarch.supervision.preload import base_preload, worker_args_env
from torch_monarch.supervision.replica import ReplicaOptions, run_replica
from torch_monarch.supervision.rundir import RunDir

__all__ = ["run_replica_mode"]

logger: logging.Logger = logging.getLogger(__name__)


def _master_port_given(args: argparse.Namespace) -> bool:
    """Whether a master port was asked for: agent_args never passes one, so only PET_MASTER_PORT can.

    torch before 2.12 defaults --master-port to 29500 rather than None, which
    would give every replica on a host the same port.
    """
    return args.master_port is not None and "PET_MASTER_PORT" in os.environ


def _prepare_rendezvous(args: argparse.Namespace) -> None:
    """torchrun's own defaulting (``torch.distributed.run.run``)."""
    from torch.distributed.run import parse_min_max_nnodes

    if args.standalone:
        args.rdzv_backend = "c10d"
        args.rdzv_endpoint = "localhost:0"
        args.rdzv_id = str(uuid.uuid4())
    elif args.rdzv_backend == "static" and not args.rdzv_endpoint and not _master_port_given(args):
        _, max_nodes = parse_min_max_nnodes(args.nnodes)
        if max_nodes == 1:
            args.rdzv_backend = "c10d"
            args.rdzv_endpoint = "localhost:0"
            args.rdzv_id = str(uuid.uuid4())
    if args.master_port is None:
        args.master_port = 29500


def _gpus_visible() -> bool:
    """Whether this host has a GPU that torch can use (NVML's count: CUDA stays uninitialised here)."""
    import torch

    return (torch.version.cuda is not None or torch.version.hip is not None) and torch.cuda.device_count() > 0


def _forks_workers(args: argparse.Namespace) -> bool:
    """Whether the workers fork from a preloaded forkserver.

    With ``--preload``; and by default on a host with a visible GPU (restarts
    then skip a new interpreter's imports; the server keeps CUDA
    uninitialised, see ``supervision/cuda_clean.py``). ``--start-method``
    given explicitly, or ``--no-python``, keeps torchrun's way.
    """
    if args.preload:
        if args.no_python:
            raise SystemExit("monarch-run: --preload forks Python workers; it cannot be used with --no-python")
        return True
    return args.start_method is None and not args.no_python and _gpus_visible()


def run_script_module(module: str, *script_args: str) -> None:
    """``python -m module args`` inside a forked worker (torchrun's ``run_script_path`` for ``--module``)."""
    import runpy
    import sys

    sys.argv = [module, *script_args]
    # Preloaded by the server (say a TorchTitan hook module): run it afresh as __main__, as
    # ``python -m`` would, without runpy's warning about a module imported before it ran.
    sys.modules.pop(module, None)
    runpy.run_module(module, run_name="__main__", alter_sys=True)


def run_replica_mode(args: argparse.Namespace) -> int:
    from torch.distributed.run import config_from_args

    replica_id = str(args.replica_id)
    run_dir = RunDir(args.run_dir) if args.run_dir else None
    preload: list[str] = []
    if _forks_workers(args):
        preload = base_preload([m for m in args.preload.split(",") if m])
        args.start_method = "forkserver"
        args.run_path = True
    elif args.start_method is None:
        args.start_method = "spawn"
    if run_dir is not None and args.log_dir is None:
        args.log_dir = str(run_dir.logs_dir(replica_id))
    _prepare_rendezvous(args)
    config, cmd, cmd_args = config_from_args(args)
    if preload and args.module:
        cmd = run_script_module  # the workers run the module, forked from the server, not a new interpreter
    env = {"REPLICA_GROUP_ID": replica_id, "NUM_REPLICA_GROUPS": str(args.replicas)}
    if preload:
        env.update(worker_args_env(args.training_script_args))  # the forkserver's preload may read them
    if args.lighthouse:
        env["TORCHFT_LIGHTHOUSE"] = args.lighthouse
    env.update(sync_env(args))
    options = ReplicaOptions(
        replica_id=replica_id,
        policy=restart_policy(args),
        hang=hang_config(args),
        run_dir=run_dir,
        preload=preload,
        env=env,
    )
    return run_replica(config, cmd, cmd_args, options)
