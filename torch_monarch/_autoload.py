"""Entry point run by every ``import torch`` (group ``torch.backends``).

torch turns an exception raised here into a failed ``import torch``, so this
never raises: it registers the backend name, pure Python, and warns when it
cannot. The C++ extension loads later, with the first monarch group.
"""

import warnings


def register() -> None:
    try:
        from torch_monarch.backend import register as register_backend

        register_backend()
    except Exception as e:  # noqa: BLE001 - must never break `import torch`
        warnings.warn(f"torch_monarch: could not register the monarch backend: {e}", stacklevel=2)
