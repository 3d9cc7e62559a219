"""GPU platform selection in setup.py (GPU_PLATFORM / MONARCH_GPU_PLATFORM, else
detection from torch and the toolchains), checked without building anything."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent


def _setup_py(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k not in ("GPU_PLATFORM", "MONARCH_GPU_PLATFORM")}
    return subprocess.run(
        [sys.executable, "setup.py", "--name"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env={**clean, **env},
    )


def test_requested_platform() -> None:
    result = _setup_py({"GPU_PLATFORM": "cpu"})
    assert result.returncode == 0, result.stderr
    assert "GPU platform cpu (requested)" in result.stderr
    assert result.stdout.strip().endswith("torch_monarch")


def test_monarch_variable_wins_and_bad_values_are_refused() -> None:
    result = _setup_py({"GPU_PLATFORM": "cuda", "MONARCH_GPU_PLATFORM": "metal"})
    assert result.returncode != 0
    assert "MONARCH_GPU_PLATFORM='metal'" in result.stderr


def test_detected_platform_says_why() -> None:
    result = _setup_py({})
    assert result.returncode == 0, result.stderr
    line = next(line for line in result.stderr.splitlines() if "GPU platform" in line)
    if torch.version.cuda is None and getattr(torch.version, "hip", None) is None:
        assert "GPU platform cpu" in line and "has no GPU support" in line, line
    else:
        assert "GPU platform" in line and "(set GPU_PLATFORM to choose)" in line, line
