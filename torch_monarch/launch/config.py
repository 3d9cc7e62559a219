"""``monarch-run``'s flags as a :class:`~torch_monarch.job.config.JobConfig`: built here, once.

Nothing past this module sees the argparse ``Namespace``: the job backends
read the typed config.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Optional

from torch_monarch.job.config import AgentFlags, JobConfig, SchedulerChoice, TrainerSpec
from torch_monarch.launch.args import hang_config, restart_policy
from torch_monarch.quorum.lighthouse import LighthouseConfig

__all__ = ["job_config"]


def _scheduler_cfg(text: str) -> dict[str, str]:
    """``partition=gpu,time=60`` as a dict."""
    cfg = {}
    for item in filter(None, (t.strip() for t in text.split(","))):
        key, _, value = item.partition("=")
        cfg[key.strip()] = value.strip()
    return cfg


def job_config(
    args: argparse.Namespace,
    *,
    lighthouse: Optional[LighthouseConfig] = None,
    env: Optional[dict[str, str]] = None,
) -> JobConfig:
    """The job ``args`` describe.

    Args:
        args: parsed ``monarch-run`` arguments.
        lighthouse: settings of the Lighthouse the job starts (default: the
            ``MONARCH_LIGHTHOUSE_*`` environment with ``--min-replicas``).
        env: extra environment of every worker.
    """
    from torch.distributed.run import determine_local_world_size, parse_min_max_nnodes

    run_dir = args.run_dir or tempfile.mkdtemp(prefix="monarch-run-")
    return JobConfig(
        replicas=args.replicas,
        min_replicas=args.min_replicas,
        trainer=TrainerSpec(
            script=args.training_script,
            args=tuple(args.training_script_args),
            module=bool(args.module),
            nproc=determine_local_world_size(args.nproc_per_node),
            preload=tuple(m for m in args.preload.split(",") if m),
        ),
        run_dir=str(Path(run_dir)),
        orchestrator=args.orchestrator,
        nnodes=parse_min_max_nnodes(args.nnodes)[1],
        policy=restart_policy(args),
        hang=hang_config(args),
        replace_replicas=args.replace_replicas,
        lighthouse=lighthouse or LighthouseConfig(min_replicas=args.min_replicas).with_env_overrides(),
        lighthouse_address=args.lighthouse,
        env=dict(env or {}),
        sync_mode=args.sync,
        sync_every=args.sync_every,
        scheduler=SchedulerChoice(args.scheduler, _scheduler_cfg(args.scheduler_cfg), args.image),
        agent=AgentFlags(
            monitor_interval=args.monitor_interval,
            redirects=str(args.redirects),
            tee=str(args.tee),
            start_method=args.start_method,
            run_path=bool(args.run_path),
            no_python=bool(args.no_python),
            role=args.role,
        ),
    )
