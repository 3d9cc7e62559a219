"""The base of torch_monarch's configuration dataclasses.

Every config (``Options``, restart policy, hang detection, quorum,
Lighthouse, failure drills, demo, launcher defaults) gets from here the two
things they share:

* durations are ``timedelta``s, as in torch's and torchft's APIs; a number
  given for one is read as seconds (``RestartPolicy(window=60)``);
* ``with_env_overrides()``: a copy with the ``{ENV_PREFIX}{FIELD}``
  variables applied (torch_monarch._env parses them, durations in seconds).
"""

from __future__ import annotations

import dataclasses
import types
import typing
from datetime import timedelta
from typing import Any, ClassVar, TypeVar, Union

from torch_monarch._env import with_env_overrides

__all__ = ["Config", "Duration", "as_timedelta", "coerce_durations"]

#: What a duration field accepts: a timedelta, or a number of seconds.
Duration = Union[timedelta, float, int]

C = TypeVar("C", bound="Config")


def as_timedelta(value: Duration, name: str = "") -> timedelta:
    """``value`` as a timedelta; a number is seconds. TypeError (naming ``name``) for anything else."""
    if isinstance(value, timedelta):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return timedelta(seconds=value)
    where = f"{name}: " if name else ""
    raise TypeError(f"{where}a duration must be a timedelta or a number of seconds, got {value!r}")


_DURATION_FIELDS: dict[type, tuple[str, ...]] = {}


def _duration_fields(config_type: type) -> tuple[str, ...]:
    """The fields of a dataclass declared ``timedelta`` or ``Optional[timedelta]`` (cached per class)."""
    known = _DURATION_FIELDS.get(config_type)
    if known is None:
        known = _DURATION_FIELDS[config_type] = _find_duration_fields(config_type)
    return known


def _find_duration_fields(config_type: type) -> tuple[str, ...]:
    hints = typing.get_type_hints(config_type)
    names = []
    for field in dataclasses.fields(config_type):
        hint = hints[field.name]
        union = typing.get_origin(hint) in (Union, types.UnionType)
        if hint is timedelta or (union and set(typing.get_args(hint)) == {timedelta, type(None)}):
            names.append(field.name)
    return tuple(names)


def coerce_durations(config: object) -> None:
    """Turns each number given for a duration field of the dataclass ``config`` into a timedelta.

    For the ``__post_init__`` of configs without environment overrides;
    :class:`Config` calls it for the others.
    """
    for name in _duration_fields(type(config)):
        value = getattr(config, name)
        if value is not None:
            # object.__setattr__: most configs are frozen.
            object.__setattr__(config, name, as_timedelta(value, f"{type(config).__name__}.{name}"))


class Config:
    """Mixin of a configuration dataclass: durations as timedelta, env overrides.

    A subclass with a ``__post_init__`` of its own calls ``super().__post_init__()``
    first, so that its checks see timedeltas.
    """

    #: ``with_env_overrides`` reads field ``foo`` from ``{ENV_PREFIX}FOO``.
    ENV_PREFIX: ClassVar[str] = "MONARCH_"

    def __post_init__(self) -> None:
        coerce_durations(self)

    def with_env_overrides(self: C) -> C:
        """A copy with the ``{ENV_PREFIX}{FIELD}`` environment variables applied."""
        return with_env_overrides(self, self.ENV_PREFIX)

    def to_env(self) -> dict[str, str]:
        """The ``{ENV_PREFIX}{FIELD}`` variables that give a worker this config (durations in seconds)."""
        return {
            f"{self.ENV_PREFIX}{field.name.upper()}": _env_value(getattr(self, field.name))
            for field in dataclasses.fields(self)  # type: ignore[arg-type]
        }


def _env_value(value: Any) -> str:
    if value is None:
        return ""  # unset: the worker keeps the default
    if isinstance(value, timedelta):
        return repr(value.total_seconds())
    return str(value)
