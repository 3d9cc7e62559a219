"""``monarch-run --preload torch_monarch.integrations.torchtitan_preload``: TorchTitan's trainers, once.

Imported by the workers' forkserver: restarted TorchTitan workers fork with
TorchTitan's trainer modules loaded and hooked, and with the tokenizer and
the dataset their arguments name already loaded (see ``torchtitan.preload``).
Add the model's module too, e.g. ``torchtitan.models.llama3_ft``.
"""

import sys

from torch_monarch.integrations.torchtitan import preload

_loaded = preload()
if _loaded:
    # The server's stderr is the replica agent's: one line saying what the workers inherit.
    print(f"torchtitan_preload: loaded in the forkserver: {', '.join(_loaded)}", file=sys.stderr, flush=True)
