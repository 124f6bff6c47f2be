"""migslice: multi-tenant GPU slicing on NVIDIA MIG for Kubernetes."""

__version__ = "0.1.0"
