"""GPU tests: marked ``cuda`` and skipped where torch sees no CUDA device.

Run them on a GPU machine with test/gpu/run_on_device.sh.
"""

from __future__ import annotations

import pytest
import torch


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device (run test/gpu/run_on_device.sh on a GPU machine)")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)
