"""Names vulture cannot see used: TypedDict keys of wire formats (read by JSON), Flask routes,
counters read by metrics and tests, report fields serialised whole, and the stable names of
ARCHITECTURE §4 (migslice/names.py). Run: vulture (configured in pyproject.toml)."""

# ruff: noqa
_ = None
_.acceptance
_.is_assumed
_.is_sharing
_.last_error
_.last_round
_.lists
_.maxdict  # reprlib.Repr's limits (migslice.errors.shown), read by reprlib
_.maxlevel
_.maxlist
_.maxother
_.maxstring
_.maxtuple
_.LISTENERS
_.load_config
_.patches
_.refused  # the status writer's SyncResult: statuses the API server refused (422), read by tests
_.repartition_share
_.repartitions_per_placed_pod
_.reservations
_.slice_acceptance
_.sock
_.state_of  # ClusterIndex: a node's NodeState computed now (bench, harness, tests)
_.status_code
_.syncs
abandoned_pods
ADMISSION_LABEL
allowedProducts
allowedProfiles
apiVersion
COMPUTE_CEIL
COMPUTE_ROUND
computeSlices
decided_s
defaultSize
deniedProfiles
dryRun
Error
extender_choice  # tests: the scan the rank index is checked against
EXTENDER_SERVICE
ExtenderArgs
FailedAndUnresolvableNodes
FailedNodes
filter_route
giProfileId
gone
Host
HostPriorityList
last_error
last_round
lastTransitionTime
lists
matchExpressions
matchLabels
maxSlicesPerPod
mean_pending
memoryMiB
memorySlices
migEnabled
MIGSLICE_PREFIX
namespaceSelector
NodeNames
Nodes
nodeSelector
observedAt
observedGeneration
oldObject
OUTPUT_ANNOTATIONS
p50_s
p99_s
patches
patchType
Pod
POLICY_KIND
POLICY_SHORT_NAME
preferredProfiles
prioritize_route
best_fit_route
quotaSummary
repartition_operations
sampled_first_failure_pct  # bench/packing/packing.py
sampled_limit  # bench/packing/packing.py
repartition_leads  # bench/packing/churn.py, bench/packing/carve.py
Score
smCount
syncs
TenantPolicySpecWire
usable_s
userInfo
WEBHOOK_SERVICE
_.busy_count
_.connection_lost
_.connection_made
_.data_received
_.eof_received
_.init_signals
_.load_wsgi
_.pause_writing
_.resume_writing
exc
writes
connected
_.cycles  # SampleTally, serialised whole by bench.packing.packing
_.calls
_.left_pending
_.next_start  # sampling.Window, read by tests
MIG_DEVICE_CLASS  # names.py: NVIDIA's DeviceClasses, stable names (docs/dra.md)
GPU_DEVICE_CLASS
mig_device_class  # names.py: migslice's per-profile DeviceClass scheme, for the webhook
profile_of_device_class
_.reserved_for  # ResourceClaim status.reservedFor, read by tests and docs/dra.md
mig_profiles  # device_classes.py: the chart's DeviceClasses, checked by tests/install
migslice_device_class
deviceAPI  # policy/wire.py: the CRD's field, as TypedDict
carve_reshape  # tests: the plain carve planner call the node-by-node chooser is checked against
instance_creates  # bench/packing/churn.py
instance_destroys  # bench/packing/churn.py
jain_index  # bench/packing/packing.py: the fairness index of the tenants' acceptance
