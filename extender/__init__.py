"""migslice."""
