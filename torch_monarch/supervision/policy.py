"""Restart policy: how many restarts, within which window, after which delay."""

from __future__ import annotations

import collections
import time
from dataclasses import dataclass, field
from typing import Callable, Deque, Optional

from torch_monarch._env import with_env_overrides

__all__ = ["Backoff", "RestartPolicy", "RestartBudget"]


@dataclass(frozen=True)
class Backoff:
    """Exponential backoff: ``initial_s * factor**n``, capped at ``max_s``.

    ``n`` counts the restarts already made within the policy's window, so a
    replica that fails once waits ``initial_s``, one that keeps failing waits
    longer and longer.
    """

    initial_s: float = 0.5
    factor: float = 2.0
    max_s: float = 30.0

    def delay(self, attempt: int) -> float:
        if attempt <= 0:
            return self.initial_s
        return min(self.max_s, self.initial_s * self.factor**attempt)


@dataclass(frozen=True)
class RestartPolicy:
    """At most ``max_restarts`` restarts within any ``window_s`` seconds.

    A failure past that budget is not handled: the supervisor escalates it
    to its parent. ``backoff`` spaces restarts out (a float is read as the
    initial delay of a :class:`Backoff` with the default factor and cap).

    Environment overrides: ``MONARCH_MAX_RESTARTS``,
    ``MONARCH_RESTART_WINDOW_S``, ``MONARCH_RESTART_BACKOFF_S`` (initial
    delay).
    """

    max_restarts: int = 3
    window_s: float = 300.0
    backoff: Backoff = field(default_factory=Backoff)

    def __post_init__(self) -> None:
        if isinstance(self.backoff, (int, float)):
            object.__setattr__(self, "backoff", Backoff(initial_s=float(self.backoff)))
        if self.max_restarts < 0:
            raise ValueError(f"max_restarts must be >= 0, got {self.max_restarts}")
        if self.window_s <= 0:
            raise ValueError(f"window_s must be positive, got {self.window_s}")

    def with_env_overrides(self) -> "RestartPolicy":
        """A copy with ``MONARCH_MAX_RESTARTS``, ``MONARCH_RESTART_WINDOW_S`` and
        ``MONARCH_RESTART_BACKOFF_S`` applied."""
        env = with_env_overrides(
            _PolicyEnv(self.max_restarts, self.window_s, self.backoff.initial_s), "MONARCH_"
        )
        return RestartPolicy(
            env.max_restarts,
            env.restart_window_s,
            Backoff(env.restart_backoff_s, self.backoff.factor, self.backoff.max_s),
        )


@dataclass(frozen=True)
class _PolicyEnv:
    max_restarts: int
    restart_window_s: float
    restart_backoff_s: float


class RestartBudget:
    """Tracks restarts against a :class:`RestartPolicy`.

    ``request()`` returns the delay to wait before restarting, or ``None``
    when the budget is spent (the caller escalates).
    """

    def __init__(self, policy: RestartPolicy, clock: Callable[[], float] = time.monotonic) -> None:
        self.policy = policy
        self._clock = clock
        self._recent: Deque[float] = collections.deque()
        self.total: int = 0

    def _trim(self, now: float) -> None:
        while self._recent and now - self._recent[0] > self.policy.window_s:
            self._recent.popleft()

    def in_window(self) -> int:
        self._trim(self._clock())
        return len(self._recent)

    def request(self) -> Optional[float]:
        now = self._clock()
        self._trim(now)
        if len(self._recent) >= self.policy.max_restarts:
            return None
        delay = self.policy.backoff.delay(len(self._recent))
        self._recent.append(now)
        self.total += 1
        return delay
