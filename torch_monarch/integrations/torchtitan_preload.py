"""``monarch-run --preload torch_monarch.integrations.torchtitan_preload``: TorchTitan's trainers, once.

Imported by the workers' forkserver: restarted TorchTitan workers fork with
TorchTitan's trainer modules loaded and hooked (see ``torchtitan.preload``).
Add the model's module too, e.g. ``torchtitan.models.llama3_ft``.
"""

from torch_monarch.integrations.torchtitan import preload

preload()
