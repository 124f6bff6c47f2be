"""``migslice doctor``: a preflight an admin runs on an installed cluster.

Shell and core, as in the other rooms: :mod:`.reading` and :mod:`.gather` read the cluster
(API objects through the kubernetes client's configuration, HTTPS probes of the servers),
:mod:`.checks` judges what was read with pure functions, :mod:`.run` runs each check with
its own timeout, :mod:`.report` prints one line per check. docs/doctor.md lists the checks.
"""
