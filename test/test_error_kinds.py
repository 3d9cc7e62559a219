"""The one table of failure kinds (csrc/common/status.h) against the Python
side: every kind names an exported ``MonarchError`` class, every such class
has a kind, and ``error_from_info`` maps each kind to its class."""

from __future__ import annotations

import torch.distributed as dist

import torch_monarch
from torch_monarch import _C
from torch_monarch.errors import error_from_info, MonarchError


def test_every_kind_names_an_exported_error_class() -> None:
    for kind, class_name in _C.ERROR_CLASSES.items():
        assert class_name in torch_monarch.__all__, (kind, class_name)
        error_class = getattr(torch_monarch, class_name)
        assert issubclass(error_class, MonarchError) and issubclass(error_class, dist.DistBackendError)


def test_every_error_class_has_a_kind() -> None:
    subclasses = {c.__name__ for c in MonarchError.__subclasses__()}
    assert subclasses == set(_C.ERROR_CLASSES.values())


def test_error_from_info_maps_each_kind_to_its_class() -> None:
    for kind, class_name in _C.ERROR_CLASSES.items():
        error = error_from_info((kind, [2, 1, 2], f"{kind} happened"))
        assert type(error).__name__ == class_name
        assert error is not None and error.failed_ranks == [1, 2] and str(error) == f"{kind} happened"
    unknown = error_from_info(("a kind from a newer build", [0], "m"))
    assert type(unknown) is MonarchError and unknown.failed_ranks == [0]
    assert error_from_info(None) is None
