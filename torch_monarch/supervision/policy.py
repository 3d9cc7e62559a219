"""Restart policy: how many restarts, within which window, after which delay."""

from __future__ import annotations

import collections
import dataclasses
import time
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Callable, Deque, Optional

from torch_monarch._config import as_timedelta, coerce_durations
from torch_monarch._env import with_env_overrides

__all__ = ["Backoff", "RestartPolicy", "RestartBudget", "replacement_policy"]


@dataclass(frozen=True)
class Backoff:
    """Exponential backoff: none for the first restart, then ``initial * factor**(n - 1)``, capped at ``max``.

    ``n`` counts the restarts already made within the policy's window since
    the replica's workers last reached training: a replica that fails once
    is restarted at once (a one-off crash costs no wait), one whose restarts
    keep failing before they train (a crash loop: a bad node, a broken
    config) waits ``initial``, then longer and longer. A restart that got
    back to training ends the loop; the replica's next failure is a new one.
    """

    initial: timedelta = timedelta(seconds=0.5)
    factor: float = 2.0
    max: timedelta = timedelta(seconds=30)

    def __post_init__(self) -> None:
        coerce_durations(self)

    def delay(self, attempt: int) -> timedelta:
        if attempt <= 0:
            return timedelta(0)
        return min(self.max, self.initial * self.factor ** (attempt - 1))


@dataclass(frozen=True)
class RestartPolicy:
    """At most ``max_restarts`` restarts within any ``window``.

    A failure past that budget is not handled: the supervisor escalates it
    to its parent. ``backoff`` spaces repeated restarts out (a duration is
    read as the initial delay of a :class:`Backoff` with the default factor
    and cap); the first restart within the window, and the first after the
    workers reached training again, is immediate.

    Environment overrides: ``MONARCH_MAX_RESTARTS``,
    ``MONARCH_RESTART_WINDOW``, ``MONARCH_RESTART_BACKOFF`` (initial
    delay), durations in seconds.
    """

    max_restarts: int = 3
    window: timedelta = timedelta(seconds=300)
    backoff: Backoff = field(default_factory=Backoff)

    def __post_init__(self) -> None:
        coerce_durations(self)
        if not isinstance(self.backoff, Backoff):
            # A bare duration (or number of seconds) is the initial delay.
            object.__setattr__(self, "backoff", Backoff(initial=as_timedelta(self.backoff, "RestartPolicy.backoff")))
        if self.max_restarts < 0:
            raise ValueError(f"max_restarts must be >= 0, got {self.max_restarts}")
        if self.window <= timedelta(0):
            raise ValueError(f"window must be positive, got {self.window}")

    def with_env_overrides(self) -> "RestartPolicy":
        """A copy with ``MONARCH_MAX_RESTARTS``, ``MONARCH_RESTART_WINDOW`` and
        ``MONARCH_RESTART_BACKOFF`` applied."""
        env = with_env_overrides(_PolicyEnv(self.max_restarts, self.window, self.backoff.initial), "MONARCH_")
        return RestartPolicy(
            env.max_restarts, env.restart_window, dataclasses.replace(self.backoff, initial=env.restart_backoff)
        )


def replacement_policy(max_replacements: int) -> RestartPolicy:
    """How often the orchestrator replaces one replica: ``max_replacements`` within an hour, without backoff."""
    return RestartPolicy(max_restarts=max_replacements, window=timedelta(hours=1), backoff=Backoff(initial=timedelta(0)))


@dataclass(frozen=True)
class _PolicyEnv:
    """The policy's fields under the names of their environment variables."""

    max_restarts: int
    restart_window: timedelta
    restart_backoff: timedelta


class RestartBudget:
    """Tracks restarts against a :class:`RestartPolicy`.

    ``request()`` returns the delay to wait before restarting, or ``None``
    when the budget is spent (the caller escalates). The clock counts seconds.
    """

    def __init__(self, policy: RestartPolicy, clock: Callable[[], float] = time.monotonic) -> None:
        self.policy = policy
        self._clock = clock
        self._recent: Deque[float] = collections.deque()
        #: restarts since the replica last reached training (the backoff's count)
        self._untrained: int = 0
        self.total: int = 0

    def _trim(self, now: float) -> None:
        window = self.policy.window.total_seconds()
        while self._recent and now - self._recent[0] > window:
            self._recent.popleft()

    def in_window(self) -> int:
        self._trim(self._clock())
        return len(self._recent)

    def request(self) -> Optional[timedelta]:
        now = self._clock()
        self._trim(now)
        if len(self._recent) >= self.policy.max_restarts:
            return None
        delay = self.policy.backoff.delay(min(len(self._recent), self._untrained))
        self._recent.append(now)
        self._untrained += 1
        self.total += 1
        return delay

    def trained(self) -> None:
        """The replica's workers reached training: the next restart is not part of a crash loop."""
        self._untrained = 0
