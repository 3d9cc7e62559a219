"""A forkserver's preload that keeps CUDA uninitialised, so that its children can use the GPU.

Workers fork from a server that imported torch, TorchFT, torch_monarch and
the script's ``--preload`` modules once (restarts in well under a second
instead of a new interpreter's imports). On a GPU that is only sound while
the server never initialised CUDA: a child of a process that called
``cuInit`` cannot use the GPU at all, and torch calls it as soon as
anything asks for a device (``torch.cuda.is_available()`` included, which
sets no flag of torch's).

So the server imports the modules one at a time and, after each, asks both
layers that can tell: torch (``torch.cuda.is_initialized()``) and the CUDA
driver itself, if it is loaded into the process. Before ``cuInit`` every
driver call but that one returns ``CUDA_ERROR_NOT_INITIALIZED``; the probe
makes one such call (``cuDeviceGetCount``), which initialises nothing. A
module after which either says "initialised" is refused with
:class:`CudaPreloadError`, which names it. Both orchestrators' servers use
:func:`import_cuda_clean`: torch elastic's forkserver (embedded) through
``_forkserver_preload`` and the Monarch replica's ``ProcForkserver``.
"""

from __future__ import annotations

import ctypes
import importlib
import os
import sys
from typing import Sequence

__all__ = ["CudaPreloadError", "cuda_initialized", "import_cuda_clean"]

#: the CUDA driver's soname; loaded into a process by the CUDA runtime (or anything else) on first use
DRIVER_LIBRARY = "libcuda.so.1"
_CUDA_SUCCESS = 0
_CUDA_ERROR_NOT_INITIALIZED = 3
_NVML_CHECK = "PYTORCH_NVML_BASED_CUDA_CHECK"


class CudaPreloadError(RuntimeError):
    """A preload module initialised CUDA in the forkserver (the message names it)."""


def _driver_state() -> str:
    """How the CUDA driver in this process answers (``""``: not loaded, or loaded but never initialised)."""
    try:
        # RTLD_NOLOAD: a handle only if the driver is already in the process; never loads it.
        driver = ctypes.CDLL(DRIVER_LIBRARY, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
    except OSError:
        return ""
    count = ctypes.c_int(0)
    result = driver.cuDeviceGetCount(ctypes.byref(count))
    if result == _CUDA_ERROR_NOT_INITIALIZED:
        return ""
    if result == _CUDA_SUCCESS:
        return f"the CUDA driver was initialised (cuInit; {count.value} devices)"
    return f"the CUDA driver answers cuDeviceGetCount with error {result}, not 'not initialised'"


def cuda_initialized() -> str:
    """Why this process can no longer fork GPU workers, or ``""`` when CUDA was never initialised here."""
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None)
    if cuda is not None and cuda.is_initialized():
        return "torch initialised CUDA (torch.cuda.is_initialized())"
    return _driver_state()


def import_cuda_clean(modules: Sequence[str]) -> None:
    """Imports ``modules`` in order; raises :class:`CudaPreloadError` naming the first that initialised CUDA.

    While they import, ``torch.cuda.is_available()`` asks NVML instead of
    the driver (torch's ``PYTORCH_NVML_BASED_CUDA_CHECK``): modules that ask
    it at import time (TorchTitan does) then leave CUDA uninitialised.
    """
    already = cuda_initialized()
    if already:
        raise CudaPreloadError(f"the forkserver had initialised CUDA before its preload ({already})")
    nvml_check = os.environ.get(_NVML_CHECK)
    os.environ[_NVML_CHECK] = "1"
    try:
        for name in modules:
            importlib.import_module(name)
            how = cuda_initialized()
            if how:
                raise CudaPreloadError(
                    f"preload module {name!r} initialised CUDA: {how}. GPU workers fork from the process that "
                    "preloads it, and a child of a process that initialised CUDA cannot use the GPU; do that "
                    "module's GPU work in the training script instead (or leave the module out of --preload)"
                )
    finally:
        if nvml_check is None:
            del os.environ[_NVML_CHECK]
        else:
            os.environ[_NVML_CHECK] = nvml_check
