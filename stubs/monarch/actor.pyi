# monarch.actor (torchmonarch 0.7), the part torch_monarch uses: torchmonarch ships no type
# information. Meshes are the protocols of torch_monarch.monarch.handles.
from typing import Any, Callable, TypeVar

from torch_monarch.monarch.handles import HostMesh

_F = TypeVar("_F", bound=Callable[..., Any])

class Actor: ...

class MeshFailure:
    @property
    def mesh_name(self) -> str: ...

class BootstrapCommand:
    args: list[str]

def this_host() -> HostMesh: ...
def endpoint(method: _F) -> _F: ...
def default_bootstrap_cmd() -> BootstrapCommand: ...

unhandled_fault_hook: Callable[[MeshFailure], None]
