"""The ``monarch-run`` launcher: torchrun-compatible, with replica groups.

See :mod:`torch_monarch.launch.main`.
"""
