"""``python -m torch_monarch.demo``: the fault-tolerance demo (the project's main job).

The collectives tour that used to run here is ``python -m torch_monarch.demo.collectives_tour``.
"""

import sys

from torch_monarch.demo.fault_tolerance import main

if __name__ == "__main__":
    sys.exit(main())
