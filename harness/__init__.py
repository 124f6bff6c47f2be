"""The harness that e2e, bench and tests share (never shipped).

A real control plane built offline (``controlplane``, with its ``pki``, ``process``, ``flags``,
``scheduler`` and ``binaries``), the calls the scenarios make to it (``api``), migslice's own
servers in it (``stack``, ``image``), the actors a bare control plane lacks (``actors``,
``install``, ``migmanager``, ``deviceplugin``), fault and load tools (``faults``, ``flood``),
and one builder of Kubernetes objects for every caller (``builders``).
"""
