"""Native (c10d) reconfigurable monarch groups for tests that run several
replicas as threads of one process.

``init_process_group(..., enable_reconfigure=True)`` makes one default group
per process, so TorchFT's integration tests, whose replicas are threads, cannot
give each replica one. A ``torch.distributed.ProcessGroup`` can also be put
together around a backend by hand, as torch's own ``new_group`` does and as
TorchFT's tests do for native Gloo (``manager_integ_test.ddp_train_loop``):
:func:`native_monarch_group` does that with a monarch backend made with
``enable_reconfigure=True``. It is a native group, not a TorchFT
``ProcessGroup``: the Manager reaches it through c10d's ``supports_reconfigure``
/ ``get_reconfigure_handle`` / ``reconfigure`` and ``_get_backend(...).get_error()``.
"""

from __future__ import annotations

import itertools
import uuid
from datetime import timedelta
from typing import Optional

import torch
import torch.distributed as dist

from torch_monarch.backend import new_backend
from torch_monarch.options import Options

__all__ = ["native_monarch_group"]

# Every group of this process takes handles of this job only: the replicas
# (threads) of one test process are one job.
_JOB = f"native-monarch-{uuid.uuid4().hex}"
_names = itertools.count()

# TorchFT's ProcessGroupGloo default.
_DEFAULT_TIMEOUT = timedelta(seconds=60)


def native_monarch_group(timeout: Optional[timedelta] = None) -> dist.ProcessGroup:
    """A native c10d group of one on a fresh monarch endpoint, which c10d's
    ``reconfigure`` forms into a group with other groups of this process."""
    name = f"native-monarch-{next(_names)}"
    # Nothing is exchanged through it: with a job, the group connects nobody until reconfigure.
    store = dist.HashStore()
    backend = new_backend(
        store,
        rank=0,
        size=1,
        group_name=name,
        timeout=timeout or _DEFAULT_TIMEOUT,
        options=Options(enable_reconfigure=True, job=_JOB),
    )
    group = dist.ProcessGroup(store, 0, 1)
    backend_type = dist.ProcessGroup.BackendType.CUSTOM
    group._set_default_backend(backend_type)
    for device in ("cpu", "cuda"):
        group._register_backend(torch.device(device), backend_type, backend)
    group._set_group_name(name)
    return group
