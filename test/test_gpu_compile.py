"""Compile-only check of the CUDA build's translation units (csrc/gpu/) on a machine
without a GPU: the host compiler, the CUDA runtime headers (test/support/
cuda_compile.py says where they come from), nccl.h from pip's nvidia-nccl-cu13
wheel and the installed torch's headers (CPU builds of torch ship c10/cuda
too). Warnings in csrc/ fail the test.
"""

from __future__ import annotations

import pytest

from cuda_compile import compile_failures, compile_flags, CSRC

# The CPU build's stand-in is not part of the CUDA build.
NOT_IN_CUDA_BUILD = {"cpu_stub.cc"}


def test_cuda_sources_compile() -> None:
    flags, missing = compile_flags()
    if not flags:
        pytest.skip(missing)
    sources = sorted(p for p in (CSRC / "gpu").glob("*.cc") if p.name not in NOT_IN_CUDA_BUILD)
    failures = compile_failures(sources, flags)
    assert not failures, "\n".join(failures)
