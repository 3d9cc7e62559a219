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


def run_replica_mode(args: argparse.Namespace) -> int:
    from torch.distributed.run import config_from_args

    replica_id = str(args.replica_id)
    run_dir = RunDir(args.run_dir) if args.run_dir else None
    preload = [m for m in args.preload.split(",") if m]
    if preload:
        args.start_method = "forkserver"
        args.run_path = True
    if run_dir is not None and args.log_dir is None:
        args.log_dir = str(run_dir.logs_dir(replica_id))
    _prepare_rendezvous(args)
    config, cmd, cmd_args = config_from_args(args)
    env = {"REPLICA_GROUP_ID": replica_id, "NUM_REPLICA_GROUPS": str(args.replicas)}
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
