"""The quorum service: TorchFT's Lighthouse, embedded in the launcher.

Every replica's TorchFT Manager asks the Lighthouse for a quorum at each
step. A replica whose Manager stops heartbeating for
``heartbeat_timeout`` is dropped from the next quorum, so that number is
how long the healthy replicas wait for a dead one: torchft's default (5 s)
is tuned for large clusters; torch_monarch's default is 0.5 s, five of the
Manager's 100 ms heartbeats, which the backend makes safe because the
failed step itself is reported by the process group at once (heartbeat
detection), not by a timeout. (On the 2-core development machine, with
every core busy training, no healthy replica was dropped from a quorum at
0.5 s.) Likewise
``join_timeout`` (how long a quorum waits for a replica that heartbeats
but has not asked to join, e.g. one still starting) is 5 s instead of 60 s.

Environment overrides: ``MONARCH_LIGHTHOUSE_<FIELD>``, durations in seconds
(e.g. ``MONARCH_LIGHTHOUSE_HEARTBEAT_TIMEOUT=2``).
"""

from __future__ import annotations

import logging
import socket
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, ClassVar, Optional

from torch_monarch._config import Config

__all__ = ["EmbeddedLighthouse", "LighthouseConfig", "TORCHFT_DEFAULTS"]

logger: logging.Logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class LighthouseConfig(Config):
    """Settings of ``torchft.coordination.LighthouseServer``.

    Attributes:
        bind: listen address (``[::]:0`` picks a free port).
        min_replicas: fewest replicas a quorum may have.
        join_timeout: how long a valid quorum waits for heartbeating
            replicas that have not asked to join yet.
        quorum_tick: how often a pending quorum is re-checked.
        heartbeat_timeout: silence after which a replica is dead.
    """

    ENV_PREFIX: ClassVar[str] = "MONARCH_LIGHTHOUSE_"

    bind: str = "[::]:0"
    min_replicas: int = 1
    join_timeout: timedelta = timedelta(seconds=5)
    quorum_tick: timedelta = timedelta(milliseconds=100)
    heartbeat_timeout: timedelta = timedelta(milliseconds=500)


#: TorchFT's own defaults (for comparisons).
TORCHFT_DEFAULTS = LighthouseConfig(
    join_timeout=timedelta(seconds=60), quorum_tick=timedelta(milliseconds=100), heartbeat_timeout=timedelta(seconds=5)
)


class EmbeddedLighthouse:
    """A LighthouseServer in this process; ``address`` is what replicas use."""

    def __init__(self, config: LighthouseConfig) -> None:
        from torchft.coordination import LighthouseServer

        self.config = config
        self._server: Optional[Any] = LighthouseServer(
            bind=config.bind,
            min_replicas=config.min_replicas,
            join_timeout_ms=_ms(config.join_timeout),
            quorum_tick_ms=_ms(config.quorum_tick),
            heartbeat_timeout_ms=_ms(config.heartbeat_timeout),
        )
        self.address: str = _reachable(self._server.address())
        logger.info("lighthouse listening on %s (%s)", self.address, config)

    def shutdown(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server = None

    def __enter__(self) -> "EmbeddedLighthouse":
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


def _ms(duration: timedelta) -> int:
    """LighthouseServer takes whole milliseconds."""
    return round(duration.total_seconds() * 1000)


def _reachable(address: str) -> str:
    """The Lighthouse reports ``http://<hostname>:<port>``; keep it if the name resolves."""
    host = address.split("://", 1)[-1].rsplit(":", 1)[0]
    try:
        socket.getaddrinfo(host, None)
        return address
    except OSError:
        port = address.rsplit(":", 1)[-1]
        return f"http://127.0.0.1:{port}"
