"""Pod annotations migslice reads and writes (ARCHITECTURE §4), and the node labels it uses."""

from __future__ import annotations

GPU_SIZE = "migslice.io/gpu-size"
GPU_MEMORY = "migslice.io/gpu-memory"
GPU_COMPUTE = "migslice.io/gpu-compute"
GPU_COUNT = "migslice.io/gpu-count"
GPU_CONTAINER = "migslice.io/gpu-container"
INPUT_ANNOTATIONS = (GPU_SIZE, GPU_MEMORY, GPU_COMPUTE, GPU_COUNT, GPU_CONTAINER)

TENANT = "migslice.io/tenant"
PROFILE = "migslice.io/profile"
POLICY = "migslice.io/policy"
# Admission request uid of the quota reservation this pod carries; when the pod shows up in
# the webhook's pod cache, its reservation is replaced by the pod's own usage.
RESERVATION = "migslice.io/reservation"

PRODUCT_LABEL = "nvidia.com/gpu.product"
SHARING_STRATEGY_LABEL = "nvidia.com/gpu.sharing-strategy"
SCHEDULER_NAME = "migslice-scheduler"
