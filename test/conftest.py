"""Fixtures shared by the suites.

The helpers the tests import (the multi-process harness ``multiproc``, the
fault helpers, the reference reductions, ...) live in ``test/support/``,
which pytest.ini puts on the path: ``from multiproc import run_workers_ok``.
"""

from __future__ import annotations

import pytest

from commands import repo_env as _repo_env


@pytest.fixture
def repo_env() -> dict[str, str]:
    """An environment for the commands a test starts, importing this checkout."""
    return _repo_env()


@pytest.fixture
def checkout_on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """Interpreters this test starts indirectly (agents, workers) import this checkout."""
    monkeypatch.setenv("PYTHONPATH", _repo_env()["PYTHONPATH"])
