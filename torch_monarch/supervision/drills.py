"""Failure drills: the one table of drill kinds (``--inject-failures kinds=...``).

A drill hits one worker of one replica. The injector
(:mod:`torch_monarch.launch.inject`) either sends the drill's signal to the
worker's pid, or leaves a drill command that the worker runs at its next
``report_progress`` (the built-in actions are in
:mod:`torch_monarch.supervision.worker`; a script registers its own with
``register_drill``). Adding a drill kind is one row here, plus its action in
the worker when it has no signal.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass
from typing import Optional

__all__ = ["DRILLS", "DRILL_KINDS", "DEFAULT_DRILL_KINDS", "Drill", "worker_drill_kinds"]


@dataclass(frozen=True)
class Drill:
    """One drill kind.

    Attributes:
        kind: its name on the command line and in the run directory's events.
        effect: what happens to the worker.
        observed_as: how the supervision tree sees it.
        signal: the signal the injector sends; None when the worker runs the drill itself.
        gpu_only: only meaningful for workers that compute on a GPU.
    """

    kind: str
    effect: str
    observed_as: str
    signal: Optional[signal.Signals] = None
    gpu_only: bool = False


DRILLS: dict[str, Drill] = {
    d.kind: d
    for d in (
        Drill("kill", "SIGKILL", "signal", signal.SIGKILL),
        Drill("segv", "SIGSEGV (faulthandler dumps its Python stacks)", "signal + stacks", signal.SIGSEGV),
        Drill("hang", "SIGSTOP: alive but frozen", "hang", signal.SIGSTOP),
        Drill("comm", "aborts its replica's process group mid-training", "collective error"),
        Drill("exc", "raises an exception in the training loop", "exception + traceback"),
        Drill("exit", "exits with code 3", "exit code"),
        Drill("cuda", "a CUDA error in its step (an out-of-range GPU index)", "exception + traceback", gpu_only=True),
    )
}
DRILL_KINDS: tuple[str, ...] = tuple(DRILLS)
#: what ``--inject-failures`` cycles through when it names no kinds
DEFAULT_DRILL_KINDS: tuple[str, ...] = ("kill", "segv", "hang", "comm")


def worker_drill_kinds() -> frozenset[str]:
    """The kinds a worker runs itself (no signal): they take effect at its next ``report_progress``."""
    return frozenset(d.kind for d in DRILLS.values() if d.signal is None)
