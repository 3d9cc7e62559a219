# monarch._rust_bindings.monarch_hyperactor.config (torchmonarch 0.7), the part torch_monarch uses.
from typing import Any

def configure(**settings: Any) -> None: ...
