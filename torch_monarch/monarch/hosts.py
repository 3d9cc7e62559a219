"""Where the Monarch orchestrator spawns its procs: this host, or the hosts of an allocation.

Without an allocation every proc goes to ``this_host()`` (the host the
spawning actor runs on). With one (``--scheduler slurm``: the SLURM job of
:mod:`torch_monarch.monarch.slurm`), the OrchestrationManager is given the
allocation's host mesh and places its Lighthouse and its replicas on those
hosts, round robin, so a replacement lands on the next host.
"""

from __future__ import annotations

from typing import Optional

from monarch.actor import this_host

from torch_monarch.monarch.handles import HostMesh

__all__ = ["HOSTS_MESH", "host_for"]

#: the name of an allocation's one host mesh (SLURM, Kubernetes)
HOSTS_MESH = "hosts"


def host_for(hosts: Optional[HostMesh], index: int) -> HostMesh:
    """Host ``index`` (modulo their number) of ``hosts``, a HostMesh with a ``hosts`` dimension; this host without one."""
    if hosts is None:
        return this_host()
    count = hosts.size("hosts")
    return hosts.slice(hosts=index % count) if count > 1 else hosts
