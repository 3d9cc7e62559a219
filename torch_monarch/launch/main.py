"""``monarch-run`` / ``python -m torch_monarch.run``: entry point.

Three ways it runs:

* ``--replica-id I``: one replica's agent (what schedulers start; see
  :mod:`torch_monarch.launch.replica_main`);
* one replica, local, no drill: like torchrun, the agent runs in this
  process (with an embedded Lighthouse for scripts that use TorchFT);
* otherwise: a job of ``--replicas`` replica groups under an orchestrator
  (:mod:`torch_monarch.launch.job`).
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Optional, Sequence

from torch_monarch.launch.args import parse_args

__all__ = ["main"]


def _setup_logging() -> None:
    level = os.environ.get("MONARCH_RUN_LOG_LEVEL", os.environ.get("LOGLEVEL", "WARNING")).upper()
    logging.basicConfig(level=level, format="[%(asctime)s %(name)s %(levelname)s] %(message)s", stream=sys.stderr)


def main(argv: Optional[Sequence[str]] = None) -> int:
    _setup_logging()
    # TorchFT's Rust side (Lighthouse, Manager) logs every quorum at INFO.
    os.environ.setdefault("RUST_LOG", "warn")
    args = parse_args(argv)
    if args.replica_id is not None:
        from torch_monarch.launch.replica_main import run_replica_mode

        return run_replica_mode(args)
    single = args.replicas == 1 and args.scheduler == "local" and not args.inject_failures and not args.dryrun
    if single and args.orchestrator == "embedded":
        from torch_monarch.launch.replica_main import run_replica_mode
        from torch_monarch.quorum.lighthouse import EmbeddedLighthouse, LighthouseConfig

        args.replica_id = "0"
        if args.tee == "0" and args.redirects == "0":
            args.tee = "3"  # like torchrun's console, and keep the logs for failure reports
        if args.lighthouse:
            return run_replica_mode(args)
        with EmbeddedLighthouse(LighthouseConfig(min_replicas=1).with_env_overrides()) as lighthouse:
            args.lighthouse = lighthouse.address
            return run_replica_mode(args)
    from torch_monarch.launch.job import run_job
    from torch_monarch.monarch._require import MonarchUnavailableError

    if args.redirects == "0" and args.tee == "0":
        args.redirects = "3"  # worker output goes to the run directory; the console shows the status view
    try:
        return run_job(args)
    except MonarchUnavailableError as e:
        print(f"monarch-run: {e}", file=sys.stderr)
        return 2


def console_main() -> None:
    """Console-script entry point."""
    sys.exit(main())
