"""Running the project's commands (monarch-run, the demo, torchrun) from tests.

``run_bounded`` runs a command in a session of its own and, if it outlives
its bound, kills the whole session (the command and every process it
started) and fails the test, so a hung launcher never outlives its test.
``repo_env`` is the environment such a command needs to import this checkout.
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path
from typing import Optional

import pytest

__all__ = ["REPO_ROOT", "repo_env", "run_bounded"]

REPO_ROOT = Path(__file__).resolve().parents[2]


def repo_env(extra: Optional[dict[str, str]] = None) -> dict[str, str]:
    """This process's environment with the repository first on PYTHONPATH, plus ``extra``."""
    path = os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path, **(extra or {})}


def run_bounded(command: list[str], timeout: float, env: Optional[dict[str, str]] = None) -> subprocess.CompletedProcess[str]:
    """Runs ``command`` (stderr into stdout) within ``timeout`` seconds, else kills its session and fails."""
    process = subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    try:
        output, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        pytest.fail(f"{command} did not finish within {timeout} s:\n{output[-5000:]}")
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    return subprocess.CompletedProcess(command, process.returncode, output, None)
