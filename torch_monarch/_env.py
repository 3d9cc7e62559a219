"""``MONARCH_*`` environment overrides for configuration dataclasses.

The one reader of ``MONARCH_*`` settings. Every config dataclass
(``torch_monarch.Options``, restart policy, hang detection, Lighthouse,
quorum, demo, launcher defaults) takes its defaults from code and lets a
launcher or an operator override any field from the environment without
touching the training script: field ``foo_bar`` of a config with prefix
``MONARCH_`` is read from ``MONARCH_FOO_BAR``. The field's declared type
decides how the string is parsed:

* ``bool``: 1/true/yes/on or 0/false/no/off;
* ``int``, ``float``, ``str``: as Python reads them;
* ``timedelta``: seconds, e.g. ``MONARCH_HEARTBEAT_TIMEOUT=1.5``;
* ``Optional[X]``: as ``X``.

Fields of other types are not overridable. An empty variable counts as unset.
"""

from __future__ import annotations

import dataclasses
import os
import types
import typing
from datetime import timedelta
from typing import Any, Callable, Mapping, Optional, TypeVar

__all__ = ["env_overrides", "parse_seconds", "with_env_overrides"]

T = TypeVar("T")

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def _parse_bool(raw: str) -> bool:
    low = raw.strip().lower()
    if low in _TRUE:
        return True
    if low in _FALSE:
        return False
    raise ValueError(f"{raw!r} is not a boolean")


def parse_seconds(raw: str) -> timedelta:
    """A duration given in seconds (``"1.5"``), as ``MONARCH_*`` durations are."""
    return timedelta(seconds=float(raw))


_PARSERS: dict[type, Callable[[str], Any]] = {
    bool: _parse_bool,
    int: int,
    float: float,
    str: str,
    timedelta: parse_seconds,
}


def _parser(annotation: Any) -> Optional[Callable[[str], Any]]:
    """How to parse a field of this type, None when it is not overridable."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return _parser(args[0]) if len(args) == 1 else None
    return _PARSERS.get(annotation)


def env_overrides(
    config_type: type, prefix: str, environ: Optional[Mapping[str, str]] = None
) -> dict[str, Any]:
    """``{field: parsed value}`` for every field of ``config_type`` set as ``{prefix}{FIELD}``.

    Raises ValueError naming the variable and the field when a value does not parse.
    """
    env = os.environ if environ is None else environ
    hints = typing.get_type_hints(config_type)
    updates: dict[str, Any] = {}
    for field in dataclasses.fields(config_type):
        name = f"{prefix}{field.name.upper()}"
        raw = env.get(name)
        parse = _parser(hints[field.name])
        if raw is None or raw == "" or parse is None:
            continue
        try:
            updates[field.name] = parse(raw)
        except ValueError as e:
            raise ValueError(f"{name}={raw!r} is not a valid value for {config_type.__name__}.{field.name}") from e
    return updates


def with_env_overrides(config: T, prefix: str, environ: Optional[Mapping[str, str]] = None) -> T:
    """Returns a copy of ``config`` with ``{prefix}{FIELD}`` variables applied."""
    return dataclasses.replace(config, **env_overrides(type(config), prefix, environ))  # type: ignore[type-var]
