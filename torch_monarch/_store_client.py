"""Rendezvous store clients for ProcessGroupMonarch, and the host name its stores advertise.

TorchFT hands every quorum a store address ``host:port/prefix`` and its own
groups open a new TCPStore connection each time (``create_store_client``).
The host and port rarely change between quorums (it is the store of one
replica group), so this keeps the connection and only puts a new
``PrefixStore`` in front of it; a kept connection that no longer answers is
replaced. Besides the round trips, this spares a TCP connect per quorum,
which on a busy host now and then waits out a dropped SYN (seconds).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from datetime import timedelta
from typing import Optional

from torch.distributed import PrefixStore, Store, TCPStore

__all__ = ["StoreClients", "advertised_host", "parse_store_addr"]

logger: logging.Logger = logging.getLogger(__name__)

_PING_KEY = "torch_monarch/store_ping"


def advertised_host() -> str:
    """The name peers reach a store of this process at: ``$MONARCH_HOST``, else
    the host name when it resolves, else 127.0.0.1."""
    host = os.environ.get("MONARCH_HOST") or socket.gethostname()
    try:
        socket.getaddrinfo(host, None)
        return host
    except OSError:
        return "127.0.0.1"


def parse_store_addr(store_addr: str) -> tuple[str, int, str]:
    """``host:port/prefix`` (host may be a bare or bracketed IPv6 address) as
    (host, port, prefix), parsed as ``torchft.process_group.create_store_client`` does."""
    addr_part, _, prefix = store_addr.partition("/")
    host, _, port = addr_part.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"store address {store_addr!r} is not host:port/prefix")
    return host.strip("[]"), int(port), prefix


class StoreClients:
    """One TCPStore client per (host, port), reused across configures."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._clients: dict[tuple[str, int], TCPStore] = {}

    def prefixed(self, store_addr: str, timeout: timedelta) -> Store:
        """A store for ``store_addr`` whose keys live under its prefix."""
        host, port, prefix = parse_store_addr(store_addr)
        client = self._client(host, port, timeout)
        return PrefixStore(prefix, client)

    def forget(self, store_addr: str) -> None:
        """Drops the kept connection for ``store_addr`` (after a failed configure)."""
        try:
            host, port, _ = parse_store_addr(store_addr)
        except ValueError:
            return
        with self._lock:
            self._clients.pop((host, port), None)

    def _client(self, host: str, port: int, timeout: timedelta) -> TCPStore:
        key = (host, port)
        with self._lock:
            client: Optional[TCPStore] = self._clients.get(key)
        if client is not None:
            try:
                client.set_timeout(timeout)
                client.add(_PING_KEY, 0)  # one round trip: is the server still there?
                return client
            except Exception as e:  # the server went away (or restarted)
                logger.info("store %s:%d does not answer (%s); reconnecting", host, port, e)
        client = TCPStore(host_name=host, port=port, is_master=False, wait_for_workers=False, timeout=timeout)
        with self._lock:
            self._clients[key] = client
        return client
