"""doctor's judgements: pure functions from what was read (a ``...Facts`` value) and the run's
:class:`~migslice.doctor.facts.Settings` to one :class:`~migslice.doctor.findings.Finding`."""
