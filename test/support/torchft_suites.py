"""TorchFT's own tests, with another process group in place of its Gloo group.

TorchFT's wheel ships its tests (``torchft/*_test.py``). Its process-group,
reconfigure, Manager and LocalSGD / DiLoCo integration tests make their
groups by calling ``ProcessGroupGloo()`` or ``ProcessGroupGloo(timeout=...)``,
a name each test module imported; their replicas are threads of the test
process. :func:`adopt` makes a TestCase that runs the chosen tests of one of
TorchFT's TestCases with those names bound to a *group factory*, any callable
that takes an optional ``timeout`` and returns a group TorchFT's Manager
accepts (``ProcessGroupMonarch`` itself is one).

The same tests exist in TorchFT 0.2 and 0.3, which form groups through
different entry points (``configure`` / ``reconfigure``), so a run on each
generation checks the group through the one that generation calls.
"""

from __future__ import annotations

import importlib
import re
from datetime import timedelta
from typing import Any, Callable, Optional
from unittest import mock, TestCase

__all__ = ["GroupFactory", "adopt"]

# Called as TorchFT's tests call ProcessGroupGloo: with no argument or a timeout.
GroupFactory = Callable[..., Any]

# The test modules that make Gloo groups (reconfigure_test is TorchFT 0.3's).
_GLOO_USERS = (
    "torchft.process_group_test",
    "torchft.reconfigure_test",
    "torchft.manager_integ_test",
    "torchft.local_sgd_integ_test",
    "torchft._test.diloco_trainer",
)


def _gloo_users() -> list[Any]:
    modules = []
    for name in _GLOO_USERS:
        try:
            modules.append(importlib.import_module(name))
        except ModuleNotFoundError:
            continue  # not in this TorchFT generation
    return [module for module in modules if hasattr(module, "ProcessGroupGloo")]


def _expansions(test: str) -> re.Pattern[str]:
    # parameterized.expand names its cases test_x_0, test_x_1_name, ...
    return re.compile(rf"{re.escape(test)}(_\d+(_\w+)?)?")


def adopt(
    base: type[TestCase], tests: list[str], factory: GroupFactory, name: str, cases_left_out: tuple[str, ...] = ()
) -> type[TestCase]:
    """A TestCase named ``name`` that runs ``base``'s ``tests`` (each with its
    parameterized expansions, but those whose name ends in one of
    ``cases_left_out``) with every Gloo group of TorchFT's tests made by
    ``factory``. A name that matches nothing raises: the list must keep up
    with TorchFT."""
    patterns = {test: _expansions(test) for test in tests}
    names = [attr for attr in dir(base) if attr.startswith("test")]
    chosen = {
        attr
        for attr in names
        if any(pattern.fullmatch(attr) for pattern in patterns.values())
        and not any(attr.endswith(f"_{case}") for case in cases_left_out)
    }
    unmatched = [test for test, pattern in patterns.items() if not any(pattern.fullmatch(attr) for attr in chosen)]
    if unmatched:
        raise LookupError(f"{base.__module__}.{base.__qualname__} has no tests named {unmatched}")

    def make_group(timeout: Optional[timedelta] = None) -> Any:
        return factory() if timeout is None else factory(timeout=timeout)

    class Adopted(base):  # type: ignore[misc, valid-type]
        @classmethod
        def setUpClass(cls) -> None:
            # Class-level so that groups made in setUpClass (MultiPgBaseTest) are ours too.
            cls._gloo_patches = [mock.patch.object(module, "ProcessGroupGloo", make_group) for module in _gloo_users()]
            for patch in cls._gloo_patches:
                patch.start()
            try:
                super().setUpClass()
            except BaseException:
                cls._stop_patches()
                raise

        @classmethod
        def tearDownClass(cls) -> None:
            try:
                super().tearDownClass()
            finally:
                cls._stop_patches()

        @classmethod
        def _stop_patches(cls) -> None:
            for patch in cls._gloo_patches:
                patch.stop()

    for attr in names:
        if attr not in chosen:
            setattr(Adopted, attr, None)  # not collected: unittest and pytest take callables only
    Adopted.__name__ = Adopted.__qualname__ = name
    return Adopted
