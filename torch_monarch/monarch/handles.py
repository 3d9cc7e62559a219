"""Monarch's handles, as this package uses them: typed views instead of ``Any``.

Monarch's meshes route endpoint calls by attribute (``mesh.run.call_one(...)``);
these protocols name what the orchestrator's actors rely on: a future that
can be awaited (inside an actor) or waited for (``get``, in the client), an
endpoint's ``call``/``call_one``, a proc mesh that spawns actors and stops,
and a host mesh (this host, or an allocation's hosts) that spawns procs.
"""

from __future__ import annotations

from typing import Any, Generator, Optional, Protocol, TypeVar

__all__ = ["ActorMesh", "Endpoint", "HostAllocation", "HostMesh", "MonarchFuture", "ProcMesh"]

T = TypeVar("T", covariant=True)


class MonarchFuture(Protocol[T]):
    """``monarch.actor.Future``: awaitable, or ``get()`` outside an event loop."""

    def get(self) -> T: ...

    def __await__(self) -> Generator[Any, Any, T]: ...


class Endpoint(Protocol):
    """One endpoint of an actor mesh."""

    def call_one(self, *args: Any) -> MonarchFuture[Any]:
        """Calls the mesh's only actor."""
        ...

    def call(self, *args: Any) -> MonarchFuture[Any]:
        """Calls every actor of the mesh; the result maps each rank to its value."""
        ...


class ActorMesh(Protocol):
    """Actors spawned on a proc mesh; every endpoint is an attribute."""

    def __getattr__(self, endpoint: str) -> Endpoint: ...


class ProcMesh(Protocol):
    """Processes that actors are spawned on."""

    def spawn(self, name: str, actor: type, *args: Any) -> ActorMesh: ...

    def stop(self) -> MonarchFuture[None]: ...


class HostMesh(Protocol):
    """Hosts that procs are spawned on: ``this_host()``, or the hosts of an allocation."""

    def spawn_procs(
        self, per_host: Optional[dict[str, int]] = None, name: Optional[str] = None, bootstrap_command: Any = None
    ) -> ProcMesh: ...

    def size(self, dim: str) -> int:
        """How many hosts along ``dim`` ("hosts")."""
        ...

    def slice(self, **coordinates: int) -> "HostMesh":
        """The hosts at ``coordinates``, e.g. ``slice(hosts=2)``."""
        ...


class HostAllocation(Protocol):
    """Hosts allocated for a job by a cluster scheduler (SLURM, Kubernetes)."""

    @property
    def job_id(self) -> Optional[str]:
        """The scheduler's id of the allocation, once submitted."""
        ...

    def start(self) -> HostMesh:
        """Submits the allocation, waits until its hosts run Monarch workers, and returns them."""
        ...

    def stop(self) -> None:
        """Ends the allocation and every proc on it."""
        ...
