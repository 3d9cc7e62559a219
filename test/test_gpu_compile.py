"""Compile-only check of the CUDA build's translation units (csrc/gpu/) on a machine
without a GPU: the host compiler, the CUDA runtime headers of the toolkit
(CUDA_HOME, default /usr/local/cuda), nccl.h from pip's nvidia-nccl-cu13 wheel
and the installed torch's headers (CPU builds of torch ship c10/cuda too). The
sources hold no device code, so nvcc is not needed; the real build compiles
them with the same host compiler. Warnings in csrc/ fail the test.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sysconfig
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CSRC = ROOT / "csrc"
# The CPU build's stand-in is not part of the CUDA build.
NOT_IN_CUDA_BUILD = {"cpu_stub.cc"}


def _cuda_home() -> Path | None:
    for candidate in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if candidate and (Path(candidate) / "include" / "cuda_runtime_api.h").exists():
            return Path(candidate)
    return None


def _nccl_include() -> Path | None:
    try:
        import nvidia.nccl  # type: ignore[import-not-found]
    except ImportError:
        return None
    for base in nvidia.nccl.__path__:
        if (Path(base) / "include" / "nccl.h").exists():
            return Path(base) / "include"
    return None


def _compile(source: Path, flags: list[str]) -> tuple[Path, int, str]:
    result = subprocess.run(flags + [str(source)], capture_output=True, text=True)
    return source, result.returncode, result.stderr


def test_cuda_sources_compile() -> None:
    from torch.utils.cpp_extension import include_paths

    home, nccl = _cuda_home(), _nccl_include()
    if home is None:
        pytest.skip("no CUDA toolkit headers (set CUDA_HOME; /usr/local/cuda/include/cuda_runtime_api.h is missing)")
    if nccl is None:
        pytest.skip("nccl.h is missing: pip install nvidia-nccl-cu13")
    compiler = shutil.which("g++") or shutil.which("c++")
    if compiler is None:
        pytest.skip("no C++ compiler")
    flags = [
        compiler, "-std=c++17", "-fsyntax-only", "-Wall", "-Wextra", "-Wno-unused-parameter",
        # CPU builds of torch lack the generated c10/cuda/impl/cuda_cmake_macros.h.
        "-DC10_CUDA_NO_CMAKE_CONFIGURE_FILE",
        f"-I{CSRC}", f"-I{home / 'include'}", f"-I{nccl}", f"-I{sysconfig.get_paths()['include']}",
    ] + [f"-I{path}" for path in include_paths()]  # fmt: skip
    sources = sorted(p for p in (CSRC / "gpu").glob("*.cc") if p.name not in NOT_IN_CUDA_BUILD)
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        results = list(pool.map(lambda source: _compile(source, flags), sources))
    failures = []
    for source, code, stderr in results:
        own_warnings = [line for line in stderr.splitlines() if re.search(r"csrc/.*: warning:", line)]
        if code != 0 or own_warnings:
            failures.append(f"{source.relative_to(ROOT)}:\n{stderr[-4000:]}")
    assert not failures, "\n".join(failures)
