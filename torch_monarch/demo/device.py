"""The demo's ``--device``: refuses, before anything starts, a device this installation cannot train on.

``--device cuda`` needs three things, each named when missing: a torch
built with GPU support, a torch_monarch extension built for the GPU
(a CPU build raises ``NotImplementedError`` for CUDA tensors in every
worker), and a visible GPU. Nothing here initialises CUDA.
"""

from __future__ import annotations

import os

__all__ = ["DeviceUnavailableError", "require_device"]


class DeviceUnavailableError(RuntimeError):
    """The demo's ``--device`` cannot be used here (the message says which part is missing)."""


def require_device(device: str) -> None:
    """Raises :class:`DeviceUnavailableError` unless the demo can train on ``device``."""
    if device == "cpu":
        return
    if device != "cuda":
        raise DeviceUnavailableError(f"unknown device {device!r}: the demo trains on 'cpu' or 'cuda'")
    import torch

    from torch_monarch._platform import gpu_report

    if torch.version.cuda is None and torch.version.hip is None:
        raise DeviceUnavailableError(
            f"--device cuda: this torch ({torch.__version__}) was built without GPU support; install a CUDA build of torch"
        )
    report = gpu_report()
    if report.platform not in ("cuda", "rocm"):
        raise DeviceUnavailableError(
            f"--device cuda: torch_monarch's extension was built for {report.platform!r}, without GPU support "
            f"({report.extension_path or report.extension_error}); rebuild it with GPU_PLATFORM=cuda (docs/GPU.md)"
        )
    if torch.cuda.device_count() < 1:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        where = f"CUDA_VISIBLE_DEVICES={visible!r}" if visible is not None else "CUDA_VISIBLE_DEVICES is unset"
        raise DeviceUnavailableError(f"--device cuda: torch sees no GPU on this host ({where})")
