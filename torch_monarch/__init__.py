"""torch_monarch: a fault-tolerant collective backend for PyTorch.

Importing this package registers the "monarch" backend, so that
``torch.distributed.init_process_group(backend="monarch")`` works.
"""

# torch first: its import runs the "torch.backends" entry point
# (torch_monarch._autoload), which imports torch_monarch.backend. Were torch
# first imported from inside torch_monarch.backend, that module would still be
# half-initialised when the entry point asks it for `register`.
import torch  # noqa: F401  isort: skip

from torch_monarch.backend import BACKEND_NAME, register
from torch_monarch.errors import (
    AbortedError,
    CollectiveMismatchError,
    CollectiveTimeoutError,
    MonarchError,
    PeerFailureError,
    ProtocolError,
    RdmaUnavailableError,
)
from torch_monarch.groups import backend_of, group_error
from torch_monarch.options import Options

__all__ = [
    "BACKEND_NAME",
    "AbortedError",
    "CollectiveMismatchError",
    "CollectiveTimeoutError",
    "MonarchError",
    "Options",
    "PeerFailureError",
    "ProtocolError",
    "RdmaUnavailableError",
    "backend_of",
    "group_error",
    "register",
]

register()
