"""Wrapping a third party's attribute once (a class's method or a module's function)."""

from __future__ import annotations

from typing import Any, Callable

__all__ = ["wrap_once"]

_WRAPPED = "_torch_monarch_hook"


def wrap_once(owner: Any, name: str, wrap: Callable[[Callable[..., Any]], Callable[..., Any]]) -> None:
    """Replaces ``owner.name`` by ``wrap(owner.name)`` unless it was wrapped so already."""
    original = getattr(owner, name)
    if not getattr(original, _WRAPPED, False):
        wrapped = wrap(original)
        setattr(wrapped, _WRAPPED, True)
        setattr(owner, name, wrapped)
