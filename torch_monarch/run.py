"""``python -m torch_monarch.run``: the ``monarch-run`` launcher.

torchrun's flags and behaviour, plus ``--replicas``, ``--min-replicas``, a
restart policy, an embedded TorchFT Lighthouse (or ``--lighthouse``),
``--inject-failures`` drills and a live status view. See
:mod:`torch_monarch.launch`.
"""

import sys

from torch_monarch.launch.main import main

if __name__ == "__main__":
    sys.exit(main())
