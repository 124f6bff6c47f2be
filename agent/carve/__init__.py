"""The node agent's carving, loaded only when its Node asks it to carve (``--carve``):

* :mod:`~agent.carve.carver`: the carve pass (journal, check, destroy and create, verify,
  advertise, publish; roll back on any refusal) over two ports, the node's GPUs and its Node;
* :mod:`~agent.carve.checks`: what it checks before and after it changes a GPU (values only);
* :mod:`~agent.carve.nvml_writes`: the GPUs port over NVML, creating and destroying instances
  at exact placements (with :mod:`agent.nvml`, the read path, the only two pynvml importers).

The read-only agent never imports this package (:mod:`agent.service`; a test checks it).
"""
