"""LighthouseActor: TorchFT's Lighthouse (the quorum service) in its own Monarch proc."""

from __future__ import annotations

import os

from monarch.actor import Actor, endpoint

from torch_monarch.quorum.lighthouse import EmbeddedLighthouse, LighthouseConfig

__all__ = ["LighthouseActor"]


class LighthouseActor(Actor):
    """Runs a ``torchft.coordination.LighthouseServer`` with ``config``'s settings."""

    def __init__(self, config: LighthouseConfig) -> None:
        self._server = EmbeddedLighthouse(config)

    @endpoint
    def address(self) -> str:
        """What replicas put in ``TORCHFT_LIGHTHOUSE``."""
        return self._server.address

    @endpoint
    def pid(self) -> int:
        return os.getpid()

    @endpoint
    def shutdown(self) -> None:
        self._server.shutdown()
