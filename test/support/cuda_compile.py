"""Compile-only checks of the CUDA build's translation units on a machine
without a GPU or nvcc: the sources hold no device code, so the host compiler
with the CUDA runtime headers, nccl.h and torch's headers checks them as the
real build compiles them.

Headers come from a CUDA toolkit (CUDA_HOME / CUDA_PATH, default
/usr/local/cuda) or, for the runtime, from the nvidia-cuda-runtime wheel a
CUDA build of torch installs (nvidia/cu13/include); nccl.h from the
nvidia-nccl wheel.
"""

from __future__ import annotations

import importlib
import os
import re
import shutil
import subprocess
import sysconfig
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Optional

__all__ = ["CSRC", "ROOT", "compile_flags", "compile_failures", "cuda_include", "nccl_include"]

ROOT = Path(__file__).resolve().parent.parent.parent
CSRC = ROOT / "csrc"


def _wheel_include(package: str, header: str) -> Optional[Path]:
    try:
        module = importlib.import_module(package)
    except ImportError:
        return None
    for base in module.__path__:
        if (Path(base) / "include" / header).exists():
            return Path(base) / "include"
    return None


def cuda_include() -> Optional[Path]:
    """Where cuda_runtime_api.h is: a toolkit's, else torch's nvidia-cuda-runtime wheel's."""
    for candidate in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if candidate and (Path(candidate) / "include" / "cuda_runtime_api.h").exists():
            return Path(candidate) / "include"
    return _wheel_include("nvidia.cu13", "cuda_runtime_api.h")


def nccl_include() -> Optional[Path]:
    return _wheel_include("nvidia.nccl", "nccl.h")


def compile_flags() -> tuple[list[str], str]:
    """The compiler command (without the source), or why there is none: an empty
    list and the reason to skip."""
    from torch.utils.cpp_extension import include_paths

    cuda, nccl = cuda_include(), nccl_include()
    if cuda is None:
        return [], "no CUDA runtime headers (set CUDA_HOME, or install a CUDA build of torch >= 2.14)"
    if nccl is None:
        return [], "nccl.h is missing: pip install nvidia-nccl-cu13"
    compiler = shutil.which("g++") or shutil.which("c++")
    if compiler is None:
        return [], "no C++ compiler"
    flags = [
        # The standard torch's BuildExtension compiles with (torch 2.14's headers need C++20).
        compiler, "-std=c++20", "-fsyntax-only", "-Wall", "-Wextra", "-Wno-unused-parameter",
        # CPU builds of torch lack the generated c10/cuda/impl/cuda_cmake_macros.h.
        "-DC10_CUDA_NO_CMAKE_CONFIGURE_FILE",
        f"-I{CSRC}", f"-I{cuda}", f"-I{nccl}", f"-I{sysconfig.get_paths()['include']}",
    ] + [f"-I{path}" for path in include_paths()]  # fmt: skip
    return flags, ""


def _compile(source: Path, flags: list[str]) -> tuple[Path, int, str]:
    result = subprocess.run(flags + [str(source)], capture_output=True, text=True)
    return source, result.returncode, result.stderr


def compile_failures(sources: list[Path], flags: list[str]) -> list[str]:
    """Each source that does not compile, or warns in csrc/, with the compiler's words."""
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        results = list(pool.map(lambda source: _compile(source, flags), sources))
    failures = []
    for source, code, stderr in results:
        own_warnings = [line for line in stderr.splitlines() if re.search(r"csrc/.*: warning:", line)]
        if code != 0 or own_warnings:
            name = source.relative_to(ROOT) if source.is_relative_to(ROOT) else source
            failures.append(f"{name}:\n{stderr[-4000:]}")
    return failures
