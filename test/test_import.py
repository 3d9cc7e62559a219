"""Importing torch_monarch or torch registers "monarch" without any warning."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Prints whether "monarch" is a registered backend after the import under test.
_CHECK = "import torch.distributed as dist; print('MONARCH' in dist.Backend._plugins)"


def _run_strict(statement: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([_REPO, env.get("PYTHONPATH", "")])
    env.pop("TORCH_DEVICE_BACKEND_AUTOLOAD", None)
    return subprocess.run(
        [sys.executable, "-W", "error", "-c", f"{statement}; {_CHECK}"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("statement", ["import torch_monarch", "import torch", "import torch_monarch.errors"])
def test_import_registers_without_warning(statement: str) -> None:
    result = _run_strict(statement)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "True", result.stdout + result.stderr
    assert "could not register" not in result.stderr
