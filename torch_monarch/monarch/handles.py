"""Monarch's handles, as this package uses them: typed views instead of ``Any``.

Monarch's meshes route endpoint calls by attribute (``mesh.run.call_one(...)``);
these protocols name what the orchestrator's actors rely on: a future that
can be awaited (inside an actor) or waited for (``get``, in the client), an
endpoint's ``call``/``call_one``, and a proc mesh that spawns actors and stops.
"""

from __future__ import annotations

from typing import Any, Generator, Protocol, TypeVar

__all__ = ["ActorMesh", "Endpoint", "MonarchFuture", "ProcMesh"]

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
