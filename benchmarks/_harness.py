"""The benchmarks' way to the one multi-process harness, test/support/multiproc.py.

Importing this module puts test/support on the path (spawned ranks inherit it)
and re-exports the harness: ``run_workers`` / ``run_workers_ok`` run a
module-level ``fn(ctx, config)`` on every rank, with every child killed and
reaped whatever happens; see multiproc for the time bounds.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "test", "support"))

from multiproc import RankResult, WorkerContext, run_workers, run_workers_ok  # noqa: E402

__all__ = ["RankResult", "WorkerContext", "run_workers", "run_workers_ok"]
