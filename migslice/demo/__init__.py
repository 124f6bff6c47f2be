"""``migslice demo``: the real webhook and extender over HTTPS on a bundled example cluster."""
