"""The carve wing of the repartition decision: the free part of GPUs in use re-shaped by the
node agent (annotation ``migslice.io/carve``), never touching a running instance.

* :mod:`~migslice.repartition.carve.planner`: pending demand + node states -> per GPU the
  instances to destroy and create;
* :mod:`~migslice.repartition.carve.gpu`: one GPU while the planner reshapes it, its pinned
  instances and the ways to get one more instance;
* :mod:`~migslice.repartition.carve.branch`: the carve branch of the state machine (plan,
  re-check, ask, observe, close).

It never imports the MIG Manager wing; what both need is the shared base of
:mod:`migslice.repartition`.
"""
