"""The MIG Manager wing of the repartition decision: whole idle GPUs re-shaped through a
mig-parted config and the node label ``nvidia.com/mig.config``.

* :mod:`~migslice.repartition.migmanager.planner`: pending demand + node states -> new layouts
  for idle GPUs, one named mig-parted config per node;
* :mod:`~migslice.repartition.migmanager.applying`: a written plan applied (the re-check right
  before a node is labelled) and observed;
* :mod:`~migslice.repartition.migmanager.closing`: how a node's step ends, and what its end
  asks for;
* :mod:`~migslice.repartition.migmanager.quarantine`: nodes MIG Manager left stuck;
* :mod:`~migslice.repartition.migmanager.messages`: Event messages and the configs the file
  keeps.

It never imports the carve wing; what both need is the shared base of
:mod:`migslice.repartition`.
"""
