# monarch.job (torchmonarch 0.7), the part torch_monarch uses (torch_monarch.monarch.slurm, .kubernetes).
from typing import Any, Optional

class JobState:
    def __getattr__(self, mesh: str) -> Any: ...

class SlurmJob:
    _slurm_job_id: Optional[str]
    def __init__(
        self,
        meshes: dict[str, int],
        python_exe: str = ...,
        slurm_args: list[str] = ...,
        monarch_port: int = ...,
        job_name: str = ...,
        log_dir: Optional[str] = ...,
        exclusive: bool = ...,
        job_start_timeout: Optional[int] = ...,
        **kwargs: Any,
    ) -> None: ...
    def _get_job_info_json(self, job_id: str) -> Optional[dict[str, Any]]: ...
    def state(self, cached_path: Optional[str] = ...) -> JobState: ...
    def kill(self) -> None: ...
