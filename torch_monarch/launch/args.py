"""``monarch-run``'s command line: torchrun's, plus replica groups.

Every torchrun flag is accepted with torchrun's meaning (the parser *is*
torchrun's, ``torch.distributed.run.get_args_parser``), so
``monarch-run --nproc-per-node 4 train.py`` behaves like
``torchrun --nproc-per-node 4 train.py`` with torch_monarch's supervision
(hang detection, restart policy with backoff, error reports). The added
flags turn one job into ``--replicas`` replica groups with a quorum.

A flag wins over its ``MONARCH_*`` variable, which wins over the default:
the defaults shown are those of :class:`LaunchDefaults`, ``RestartPolicy``
and ``HangConfig`` with their environment overrides applied (the one reader
of those variables, ``torch_monarch._env``).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from dataclasses import dataclass
from datetime import timedelta
from typing import Optional, Sequence

from torch_monarch._config import Config
from torch_monarch.job.config import sync_env as job_sync_env
from torch_monarch.launch.backends import BACKENDS
from torch_monarch.supervision.policy import Backoff, RestartPolicy
from torch_monarch.supervision.probes import HangConfig
from torch_monarch.quorum.sync import SYNC_MODES

__all__ = ["LaunchDefaults", "get_args_parser", "hang_config", "parse_args", "restart_policy", "sync_env"]


@dataclass(frozen=True)
class LaunchDefaults(Config):
    """Defaults of the replica-group flags (env: ``MONARCH_<FIELD>``, e.g. ``MONARCH_REPLICAS``)."""

    replicas: int = 1
    min_replicas: int = 1
    lighthouse: str = ""
    replace_replicas: int = 1
    orchestrator: str = "embedded"


def _add(group: argparse._ArgumentGroup, flag: str, **kwargs: object) -> None:
    """Adds ``--a-b`` with torchrun's ``--a_b`` alias."""
    flags = [flag]
    if "-" in flag[2:]:
        flags.append("--" + flag[2:].replace("-", "_"))
    group.add_argument(*flags, **kwargs)  # type: ignore[arg-type]


def _add_seconds(group: argparse._ArgumentGroup, flag: str, default: timedelta, help: str) -> None:
    """Adds a duration flag: a number of seconds on the command line, ``default`` from the config."""
    _add(group, flag, type=float, default=default.total_seconds(), metavar="SECONDS", help=help)


def get_args_parser() -> argparse.ArgumentParser:
    from torch.distributed.run import get_args_parser as torchrun_parser

    defaults = LaunchDefaults().with_env_overrides()
    policy = RestartPolicy().with_env_overrides()
    hang = HangConfig().with_env_overrides()
    parser = torchrun_parser()
    parser.prog = "monarch-run"
    parser.description = (
        "torchrun-compatible launcher with replica groups, a TorchFT quorum, "
        "restart policies, failure drills and a live status view."
    )
    # torchrun never restarts by default; a fault-tolerant launcher does. The start method's default
    # (None unless PET_START_METHOD) is decided per host: a forkserver on GPU hosts (replica_main).
    parser.set_defaults(max_restarts=policy.max_restarts, start_method=os.environ.get("PET_START_METHOD"))
    group = parser.add_argument_group("replica groups (torch_monarch)")
    _add(group, "--replicas", type=int, default=defaults.replicas, help="Replica groups (default 1).")
    _add(
        group,
        "--min-replicas",
        type=int,
        default=defaults.min_replicas,
        help="Fewest replicas a quorum may have and the job may go on with.",
    )
    _add(
        group,
        "--lighthouse",
        default=defaults.lighthouse,
        help="Address of an existing TorchFT Lighthouse; default: an embedded one.",
    )
    _add_seconds(
        group,
        "--restart-window",
        policy.window,
        help="Seconds over which --max-restarts counts a replica's restarts (default 300).",
    )
    _add_seconds(
        group,
        "--restart-backoff",
        policy.backoff.initial,
        help="Delay before a replica's second restart within the window; doubles with each further one "
        "(the first restart is immediate).",
    )
    _add(
        group,
        "--replace-replicas",
        type=int,
        default=defaults.replace_replicas,
        help="How often a replica that escalates is replaced by a new allocation before the job goes on without it.",
    )
    _add_seconds(
        group,
        "--hang-timeout",
        hang.progress_timeout,
        help="Seconds without report_progress() after which a training worker is hung (0: off).",
    )
    _add(
        group,
        "--sync",
        choices=list(SYNC_MODES),
        default=None,
        help="How the training script synchronises replicas (exported as MONARCH_SYNC_MODE): "
        "diloco (TorchFT's DiLoCo, the default of torch_monarch.quorum.SyncConfig) or per-step.",
    )
    _add(
        group,
        "--sync-every",
        type=int,
        default=None,
        help="Inner steps between DiLoCo's outer syncs (MONARCH_SYNC_EVERY; default 20).",
    )
    _add(group, "--no-hang-detection", action="store_true", help="Do not probe for hung workers (like torchrun).")
    _add(
        group,
        "--inject-failures",
        default="",
        help="Failure drill, e.g. 'every=20s,kinds=kill,segv,hang,comm,seed=1' (also start=, until=, count=).",
    )
    _add(
        group,
        "--status",
        choices=["live", "log", "none"],
        default="",
        help="Status view: live (redrawn table; default on a terminal), log (lines), none.",
    )
    _add(group, "--run-dir", default="", help="Directory for status, events and logs (default: a new temporary one).")
    _add(
        group,
        "--preload",
        default="",
        help="Comma-separated modules imported once in a forkserver, after torch, torch_monarch and torchft; "
        "workers fork from it with them loaded (implies --start-method forkserver and --run-path): restarts in "
        "a fraction of a second. The default on a host with a visible GPU, with no modules of its own, unless "
        "--start-method is given. A module that initialises CUDA is refused (its forked workers could not use "
        "the GPU).",
    )
    _add(
        group,
        "--scheduler",
        default="local",
        help="Where replicas run: local, or a TorchX scheduler (slurm, kubernetes, ...).",
    )
    _add(group, "--scheduler-cfg", default="", help="TorchX run options, e.g. 'partition=gpu,time=60'.")
    _add(group, "--image", default="", help="Image or working directory for cluster schedulers.")
    _add(
        group,
        "--orchestrator",
        choices=list(BACKENDS),
        default=defaults.orchestrator,
        help="Who supervises the replicas: embedded (torchrun's elastic agent; default) or monarch "
        "(real Monarch actors; pip install 'torch_monarch[monarch]').",
    )
    _add(group, "--dryrun", action="store_true", help="Print each replica's job spec and exit.")
    _add(group, "--replica-id", default=None, help=argparse.SUPPRESS)
    return parser


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    args = get_args_parser().parse_args(argv)
    if args.replicas < 1:
        raise SystemExit("monarch-run: --replicas must be >= 1")
    if not 1 <= args.min_replicas <= args.replicas:
        raise SystemExit("monarch-run: --min-replicas must be between 1 and --replicas")
    if args.sync_every is not None and args.sync_every < 1:
        raise SystemExit(f"monarch-run: --sync-every must be >= 1 (inner steps between outer syncs), got {args.sync_every}")
    return args


def restart_policy(args: argparse.Namespace) -> RestartPolicy:
    """A replica's restart policy from ``--max-restarts``, ``--restart-window`` and ``--restart-backoff`` (seconds)."""
    return RestartPolicy(args.max_restarts, args.restart_window, Backoff(initial=args.restart_backoff))


def hang_config(args: argparse.Namespace) -> HangConfig:
    """``MONARCH_HANG_*`` settings under ``--hang-timeout`` (seconds) and ``--no-hang-detection``.

    The flag's default already is ``MONARCH_HANG_PROGRESS_TIMEOUT``'s value, so the flag wins when given.
    """
    hang = HangConfig().with_env_overrides()
    return dataclasses.replace(
        hang, enabled=hang.enabled and not args.no_hang_detection, progress_timeout=args.hang_timeout
    )


def sync_env(args: argparse.Namespace) -> dict[str, str]:
    """The workers' ``MONARCH_SYNC_*`` environment for ``--sync``/``--sync-every`` (only those given)."""
    return job_sync_env(args.sync, args.sync_every)
