"""torch_monarch: a fault-tolerant collective backend for PyTorch.

Importing this package registers the "monarch" backend, so that
``torch.distributed.init_process_group(backend="monarch")`` works.
"""

from torch_monarch.backend import BACKEND_NAME, register
from torch_monarch.errors import (
    AbortedError,
    CollectiveMismatchError,
    CollectiveTimeoutError,
    MonarchError,
    PeerFailureError,
    ProtocolError,
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
    "backend_of",
    "group_error",
    "register",
]

register()
