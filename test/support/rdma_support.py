"""The rdma transport in tests: libfabric's tcp provider on loopback stands in
for RDMA hardware, running the same calls (fi_mr_reg, fi_read, completions)."""

from __future__ import annotations

import ctypes

import pytest

# A group's environment for the rdma transport over the tcp provider on loopback.
RDMA_ENV = {"MONARCH_TRANSPORT": "rdma", "MONARCH_RDMA_PROVIDER": "tcp;ofi_rxm", "FI_TCP_IFACE": "lo"}


def rdma_unavailable() -> str:
    """Why the rdma tests cannot run here; empty when they can. Loads nothing
    into torch_monarch: children import this module before their environment
    (say, MONARCH_LIBFABRIC_LIBRARY) is set."""
    from torch_monarch import _C

    if not _C.RDMA_BUILT:
        return "this build has no rdma transport (libfabric's headers were missing)"
    try:
        ctypes.CDLL("libfabric.so.1")
    except OSError as e:
        return f"libfabric not loadable ({e}); apt-get install libfabric1"
    return ""


def what_a_missing_libfabric_names(library: str) -> tuple[str, ...]:
    """What an error about libfabric not loading from ``library`` must say.

    libfabric is an optional system library, and either outcome is honest: a
    build with the rdma transport names the file it could not load and the
    package that has it (libfabric1); a build made without libfabric's headers
    has nothing to load, and names the headers' package and a rebuild."""
    from torch_monarch import _C

    if _C.RDMA_BUILT:
        return (library, "apt-get install libfabric1")
    return ("headers were missing", "apt-get install libfabric-dev", "then rebuild")


_WHY = rdma_unavailable()
requires_rdma = pytest.mark.skipif(bool(_WHY), reason=_WHY or "libfabric available")
