"""The migslice node agent: reads real MIG state through NVML and publishes it on the Node."""
