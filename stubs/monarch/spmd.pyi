# monarch.spmd (torchmonarch 0.7), the part torch_monarch uses.
from typing import Optional

from torch_monarch.monarch.handles import ProcMesh

async def setup_torch_elastic_env_async(
    proc_mesh: ProcMesh, master_addr: Optional[str] = None, master_port: Optional[int] = None
) -> None: ...
