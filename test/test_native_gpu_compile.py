"""Compile-only check, on CI's second stack (torch >= 2.14), that the native
reconfigure path (C10D_BACKEND_HAS_RECONFIGURE) compiles in the CUDA build,
against torch 2.14's headers, with the CUDA runtime headers and nccl.h its
wheel brings (test/support/cuda_compile.py): the translation units only the
CUDA build has (csrc/gpu/, the NCCL route the reconfigure rebinds), the native
reconfigure and the dispatch that rebinds the GPU route, and a probe that fails
unless torch's headers turn the native contract on. Outside csrc/gpu/ no code
depends on GPU support (no conditional compilation but the CPU's own), so the
stack's CPU build compiles the rest as the CUDA build would. Nothing here runs
on a GPU.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from cuda_compile import compile_failures, compile_flags, CSRC

pytestmark = [
    pytest.mark.newest_stack,
    pytest.mark.skipif(
        not hasattr(dist.ProcessGroup, "reconfigure"),
        reason=f"c10d's native reconfigure needs torch >= 2.14 (this is {torch.__version__})",
    ),
    pytest.mark.timeout(900),
]

# The CPU build's stand-in is not part of the CUDA build.
NOT_IN_CUDA_BUILD = {"gpu/cpu_stub.cc"}
# The native reconfigure, and the dispatch through which it rebinds the GPU route.
NATIVE_PATH = ("backend/native_reconfigure.cc", "backend/device_dispatch.cc")
# Fails to compile unless torch's headers turn the native contract on.
NATIVE_CONTRACT_ON = """
#include "backend/monarch_backend.h"
#ifndef MONARCH_NATIVE_RECONFIGURE
#error "C10D_BACKEND_HAS_RECONFIGURE is not defined by torch's headers: the native reconfigure is compiled out"
#endif
"""


def cuda_build_sources() -> list[Path]:
    gpu = [path for path in (CSRC / "gpu").glob("*.cc") if path.relative_to(CSRC).as_posix() not in NOT_IN_CUDA_BUILD]
    return sorted(gpu) + [CSRC / path for path in NATIVE_PATH]


def test_cuda_build_compiles_with_native_reconfigure() -> None:
    flags, missing = compile_flags()
    if not flags:
        pytest.fail(f"the second stack must be able to compile the CUDA sources: {missing}")
    with tempfile.TemporaryDirectory() as scratch:
        probe = Path(scratch) / "native_contract_on.cc"
        probe.write_text(NATIVE_CONTRACT_ON)
        failures = compile_failures([probe, *cuda_build_sources()], flags)
    assert not failures, "\n".join(failures)
