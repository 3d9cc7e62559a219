# Types of the C++ extension torch_monarch._C (csrc/python/bindings.cc).
from typing import Any, Optional, TypedDict, overload

import torch

from torch._C._distributed_c10d import Backend, Store, Work

from torch_monarch.options import Options

# {error_info() kind: torch_monarch.errors class name}, from the table of
# failure kinds in csrc/common/status.h.
ERROR_CLASSES: dict[str, str]

class MonarchBackend(Backend):
    """The "monarch" c10d backend of one group (see torch_monarch.backend_of)."""

    @property
    def supports_shrinking(self) -> bool: ...
    def shrink(
        self, ranks_to_exclude: list[int], shrink_flags: int = 0, pg_options: Optional[Any] = None
    ) -> Backend: ...
    @overload
    def reconfigure(self, store: Store, rank: int, size: int, group_name: str) -> MonarchBackend: ...
    # torch >= 2.14 (NATIVE_RECONFIGURE): c10d's reconfigure, in place.
    @overload
    def reconfigure(self, opts: Any) -> Work: ...
    def error_info(self) -> Optional[tuple[str, list[int], str]]: ...
    # Threads that reduce and copy the group's large messages, its worker included.
    @property
    def threads(self) -> int: ...
    def connection_count(self) -> int: ...
    def channel_count(self) -> int: ...
    def payload_bytes_sent(self) -> list[int]: ...

def create_backend(store: Store, rank: int, size: int, group_name: str, options: Options) -> MonarchBackend: ...

# Whether this build has c10d's native reconfigure (torch >= 2.14).
NATIVE_RECONFIGURE: bool
def backend_option_names() -> list[str]: ...
def gpu_report() -> list[tuple[str, str]]: ...
def choose_gpu_route(gpu_transport: str, ranks: list[tuple[bytes, bool]]) -> tuple[str, str]: ...

class RdmaReport(TypedDict):
    library: str
    version: str
    error: str
    # (provider, fabric, domain, rma) of each provider with reliable datagram endpoints
    providers: list[tuple[str, str, str, bool]]

# Whether the rdma transport was compiled against libfabric's headers.
RDMA_BUILT: bool

def rdma_report() -> RdmaReport: ...
def rdma_resources() -> dict[str, int]: ...
# CPUs this process may keep busy: its affinity mask, capped by its cgroup's CPU quota (rounded up).
def usable_cpus() -> int: ...
# The tightest CPU quota in CPUs over the cgroup path that the texts of /proc/<pid>/cgroup and
# /proc/<pid>/mountinfo describe; None where none is set.
def cgroup_cpu_limit(proc_cgroup: str, proc_mountinfo: str) -> Optional[float]: ...
# src into dst (CPU, contiguous, equal bytes) with the collectives' streaming stores.
def streaming_copy(dst: torch.Tensor, src: torch.Tensor) -> None: ...
