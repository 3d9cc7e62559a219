"""Runnable demonstrations of torch_monarch.

* ``python -m torch_monarch.demo``: fault-tolerant training through injected
  failures (:mod:`torch_monarch.demo.fault_tolerance`).
* ``python -m torch_monarch.demo.collectives_tour``: every collective once.
"""
