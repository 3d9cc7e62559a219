"""Failure drills: ``--inject-failures every=20s,kinds=kill,segv,hang,comm,seed=1``.

The kinds, what each does to one worker of one replica and how supervision
observes it are the table :data:`~torch_monarch.supervision.drills.DRILLS`.
A drill with a signal is sent to the worker's pid (as reported in its
status file); the others are drill commands the worker runs at its next
``report_progress``. Kinds are used in the given order, round robin, so
every kind occurs; the victim (replica, rank) is drawn with ``seed``. A
failure is injected only into a replica whose workers are all training, so
one failure is recovered before the next hits the same replica.
"""

from __future__ import annotations

import logging
import os
import random
import re
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Callable, Optional, Sequence

from torch_monarch._config import coerce_durations
from torch_monarch.supervision.drills import DEFAULT_DRILL_KINDS, DRILL_KINDS, DRILLS
from torch_monarch.supervision.events import Event
from torch_monarch.supervision.rundir import DrillCommand, RunDir
from torch_monarch.supervision.states import ACTIVE_WORKER_STATES, SupervisorState

__all__ = ["FailureInjector", "Injection", "InjectionSpec"]

logger: logging.Logger = logging.getLogger(__name__)


_UNITS = {"ms": timedelta(milliseconds=1), "s": timedelta(seconds=1), "m": timedelta(minutes=1)}


def _duration(text: str) -> timedelta:
    """``20s``, ``500ms``, ``2m``; a bare number is seconds."""
    match = re.fullmatch(r"\s*([0-9.]+)\s*(ms|s|m)?\s*", text)
    if not match:
        raise ValueError(f"not a duration: {text!r}")
    return float(match.group(1)) * _UNITS[match.group(2) or "s"]


@dataclass(frozen=True)
class InjectionSpec:
    """When and what to inject.

    Attributes:
        every: time between injections.
        kinds: kinds to cycle through (:data:`~torch_monarch.supervision.drills.DRILLS`).
        seed: victim selection seed.
        start: first injection, after training starts (default ``every``).
        until: no injection after this long.
        count: at most this many injections.
    """

    every: timedelta = timedelta(seconds=20)
    kinds: tuple[str, ...] = DEFAULT_DRILL_KINDS
    seed: int = 0
    start: Optional[timedelta] = None
    until: Optional[timedelta] = None
    count: Optional[int] = None

    def __post_init__(self) -> None:
        coerce_durations(self)
        unknown = [k for k in self.kinds if k not in DRILLS]
        if unknown or not self.kinds:
            raise ValueError(f"unknown failure kinds {unknown}; choose from {', '.join(DRILL_KINDS)}")
        if self.every <= timedelta(0):
            raise ValueError("every must be positive")

    @classmethod
    def parse(cls, text: str) -> "InjectionSpec":
        """Parses ``every=20s,kinds=kill,segv,hang,comm,seed=1,start=10s,until=100s,count=5``."""
        values: dict[str, list[str]] = {}
        key: Optional[str] = None
        for token in (t.strip() for t in text.split(",")):
            if not token:
                continue
            if "=" in token:
                key, value = token.split("=", 1)
                key = key.strip()
                values.setdefault(key, []).append(value.strip())
            elif key == "kinds":
                values[key].append(token)
            else:
                raise ValueError(f"cannot parse {token!r} in --inject-failures {text!r}")
        fields: dict[str, object] = {}
        for name, items in values.items():
            if name in ("every", "start", "until"):
                fields[name] = _duration(items[0])
            elif name == "kinds":
                fields["kinds"] = tuple(k for item in items for k in item.replace("+", " ").split())
            elif name == "seed":
                fields["seed"] = int(items[0])
            elif name == "count":
                fields["count"] = int(items[0])
            else:
                raise ValueError(f"unknown key {name!r} in --inject-failures {text!r}")
        return cls(**fields)  # type: ignore[arg-type]

    def schedule(self) -> list[float]:
        """Planned injection offsets (seconds after start), up to ``until``/``count``."""
        out: list[float] = []
        every = self.every.total_seconds()
        t = every if self.start is None else self.start.total_seconds()
        limit = self.until.total_seconds() if self.until is not None else float("inf")
        while t <= limit and (self.count is None or len(out) < self.count):
            out.append(t)
            if self.until is None and self.count is None and len(out) >= 10000:
                break
            t += every
        return out


@dataclass(frozen=True)
class Injection:
    """One injected failure."""

    id: int
    kind: str
    replica_id: str
    rank: int
    pid: int
    t: float
    planned_s: float


class FailureInjector:
    """Injects failures into a running job per an :class:`InjectionSpec`.

    Call :meth:`tick` regularly (the launcher's loop does) after
    :meth:`start`.
    """

    def __init__(
        self,
        run_dir: RunDir,
        spec: InjectionSpec,
        replica_ids: Sequence[str],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.run_dir = run_dir
        self.spec = spec
        self.replica_ids = list(replica_ids)
        self._clock = clock
        self._rng = random.Random(spec.seed)
        self._plan = spec.schedule()
        self._start: Optional[float] = None
        self.injections: list[Injection] = []

    def start(self, now: Optional[float] = None) -> None:
        self._start = self._clock() if now is None else now

    @property
    def started(self) -> bool:
        return self._start is not None

    @property
    def done(self) -> bool:
        return self._start is not None and len(self.injections) >= len(self._plan)

    def _candidates(self) -> list[tuple[str, int, int]]:
        """(replica, rank, pid) of workers in replicas whose workers are all training."""
        out: list[tuple[str, int, int]] = []
        for replica_id in self.replica_ids:
            agent = self.run_dir.read_agent(replica_id)
            if agent is None or agent.state != SupervisorState.RUNNING:
                continue
            pids = set(agent.workers.values())
            statuses = []
            for rank in range(len(agent.workers)):
                status = self.run_dir.read_worker(replica_id, rank)
                if status is None or status.state not in ACTIVE_WORKER_STATES or status.pid not in pids:
                    break
                statuses.append(status)
            else:
                out.extend((replica_id, s.rank, s.pid) for s in statuses)
        return out

    def tick(self) -> Optional[Injection]:
        """Injects the next failure if it is due and a victim is available."""
        if self._start is None or self.done:
            return None
        planned = self._plan[len(self.injections)]
        if self._clock() - self._start < planned:
            return None
        candidates = self._candidates()
        if not candidates:
            return None  # every replica is recovering: try again at the next tick
        kind = self.spec.kinds[len(self.injections) % len(self.spec.kinds)]
        replica_id, rank, pid = self._rng.choice(sorted(candidates))
        injection = Injection(len(self.injections), kind, replica_id, rank, pid, time.time(), planned)
        self._inject(injection)
        self.injections.append(injection)
        return injection

    def _inject(self, injection: Injection) -> None:
        self.run_dir.event(
            Event.INJECT,
            t=injection.t,
            id=injection.id,
            kind=injection.kind,
            replica=injection.replica_id,
            rank=injection.rank,
            pid=injection.pid,
            planned_s=injection.planned_s,
        )
        logger.warning(
            "injecting %s into replica %s rank %d (pid %d)", injection.kind, injection.replica_id, injection.rank, injection.pid
        )
        sig = DRILLS[injection.kind].signal
        if sig is not None:
            try:
                os.kill(injection.pid, sig)
            except ProcessLookupError:
                logger.warning("injection target pid %d already gone", injection.pid)
            return
        self.run_dir.write_drill(injection.replica_id, injection.rank, DrillCommand(injection.id, injection.kind, injection.t))
