"""``MONARCH_*`` environment overrides for configuration dataclasses.

Every config dataclass of the Python layer (restart policy, hang detection,
Lighthouse, quorum) takes its defaults from code and lets a launcher or an
operator override any field from the environment, without touching the
training script: field ``foo_bar`` of a config with prefix ``MONARCH_`` is
read from ``MONARCH_FOO_BAR``.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Mapping, Optional, TypeVar

__all__ = ["with_env_overrides"]

T = TypeVar("T")

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def _parse(name: str, raw: str, current: Any) -> Any:
    kind = type(current)
    if kind is bool:
        low = raw.strip().lower()
        if low in _TRUE:
            return True
        if low in _FALSE:
            return False
        raise ValueError(f"{name}={raw!r} is not a boolean")
    if kind is int:
        return int(raw)
    if kind is float:
        return float(raw)
    return raw


def with_env_overrides(config: T, prefix: str, environ: Optional[Mapping[str, str]] = None) -> T:
    """Returns a copy of ``config`` with ``{prefix}{FIELD}`` variables applied.

    Only scalar fields (bool, int, float, str) are overridable; the type of
    the field's current value decides how the string is parsed.
    """
    env = os.environ if environ is None else environ
    updates: dict[str, Any] = {}
    for field in dataclasses.fields(config):  # type: ignore[arg-type]
        current = getattr(config, field.name)
        if not isinstance(current, (bool, int, float, str)):
            continue
        name = f"{prefix}{field.name.upper()}"
        raw = env.get(name)
        if raw is None or raw == "":
            continue
        try:
            updates[field.name] = _parse(name, raw, current)
        except ValueError as e:
            raise ValueError(f"{name}={raw!r} is not a valid value for {type(config).__name__}.{field.name}") from e
    return dataclasses.replace(config, **updates)  # type: ignore[type-var]
