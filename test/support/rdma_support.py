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


_WHY = rdma_unavailable()
requires_rdma = pytest.mark.skipif(bool(_WHY), reason=_WHY or "libfabric available")
