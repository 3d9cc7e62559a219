"""Hang probes: how a replica supervisor tells a hung worker from a slow one.

Two independent signals, checked on every monitor tick of the agent:

* the process state: a worker that the kernel reports stopped (``T``, e.g.
  SIGSTOP) for longer than ``stopped_grace`` is hung. This is exact and
  costs one read of ``/proc/<pid>/stat``;
* progress: a worker in the ``training`` state whose last
  ``report_progress`` is older than ``progress_timeout`` is hung
  (deadlock, livelock, stuck I/O). The timeout must exceed the slowest
  normal step, so it is the slower signal.

The backend supplies a third: a hung peer makes the other workers'
collectives fail after ``MONARCH_HEARTBEAT_TIMEOUT`` with a
``PeerFailureError`` naming it, which those workers report.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Callable, ClassVar, Mapping, Optional

from torch_monarch._config import Config
from torch_monarch.supervision.rundir import RunDir
from torch_monarch.supervision.states import WorkerState

__all__ = ["HangConfig", "HangProbe", "Hang", "process_state"]


@dataclass(frozen=True)
class HangConfig(Config):
    """Hang detection settings (env: ``MONARCH_HANG_<FIELD>``, durations in seconds).

    Attributes:
        enabled: probe at all (a plain torchrun agent does not).
        stopped_grace: how long a stopped process may stay stopped.
        progress_timeout: how long a training worker may go without
            reporting progress; 0 disables the progress probe.
    """

    ENV_PREFIX: ClassVar[str] = "MONARCH_HANG_"

    enabled: bool = True
    stopped_grace: timedelta = timedelta(seconds=0.3)
    progress_timeout: timedelta = timedelta(seconds=60)


@dataclass(frozen=True)
class Hang:
    """A worker the probe declared hung."""

    local_rank: int
    pid: int
    reason: str
    signal: Optional[str] = None


def process_state(pid: int) -> Optional[str]:
    """The one-letter kernel state of ``pid`` (R, S, D, T, t, Z, ...), None if gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    # The command name is in parentheses and may contain spaces.
    close = data.rfind(b")")
    if close < 0 or close + 2 >= len(data):
        return None
    return chr(data[close + 2])


class HangProbe:
    """Checks one replica's workers; see the module docstring."""

    def __init__(
        self,
        config: HangConfig,
        run_dir: Optional[RunDir],
        replica_id: str,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self._run_dir = run_dir
        self._replica_id = replica_id
        self._clock = clock
        self._wall = wall_clock
        self._stopped_since: dict[int, float] = {}
        #: a worker of this attempt reported the ``training`` state (the restart worked)
        self.saw_training = False

    def reset(self) -> None:
        self._stopped_since.clear()
        self.saw_training = False

    def check(self, pids: Mapping[int, int], ranks: Optional[Mapping[int, int]] = None) -> list[Hang]:
        """Returns the hung workers among ``pids`` (local rank → pid).

        ``ranks`` maps local rank to the rank in the replica (status files
        are per replica rank); identity by default. Also notes whether a
        worker of this attempt reached training (:attr:`saw_training`), with
        the probe disabled too: the restart policy's backoff reads it.
        """
        hung: list[Hang] = []
        now = self._clock()
        live = set(pids.values())
        for pid in list(self._stopped_since):
            if pid not in live:
                del self._stopped_since[pid]
        for local_rank, pid in pids.items():
            if self.config.enabled and process_state(pid) in ("T", "t"):
                since = self._stopped_since.setdefault(pid, now)
                if now - since >= self.config.stopped_grace.total_seconds():
                    hung.append(Hang(local_rank, pid, f"process stopped for {now - since:.1f}s", signal="SIGSTOP"))
                continue
            self._stopped_since.pop(pid, None)
            progress_timeout = self.config.progress_timeout.total_seconds() if self.config.enabled else 0.0
            if self._run_dir is None or (self.saw_training and progress_timeout <= 0):
                continue  # nothing left to learn from the worker's status file
            rank = ranks[local_rank] if ranks is not None else local_rank
            status = self._run_dir.read_worker(self._replica_id, rank)
            if status is None or status.pid != pid or status.state != WorkerState.TRAINING:
                continue
            self.saw_training = True
            silent = self._wall() - status.t
            if progress_timeout > 0 and silent > progress_timeout:
                hung.append(Hang(local_rank, pid, f"no progress for {silent:.1f}s (step {status.step})"))
        return hung
