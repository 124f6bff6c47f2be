# Thin wrapper: every target installs what it needs into .venv first.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PYTEST_ARGS ?=
BENCH_CLUSTER_ARGS ?=

.PHONY: install lint typecheck test image e2e manifests bench bench-install bench-test \
	bench-latency bench-serving bench-packing bench-saturation bench-sampling bench-churn bench-carve bench-exact \
	bench-scale bench-plane bench-cluster bench-dra demo example verify clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test,lint]'
	touch $@

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports
	$(BIN)/vulture

typecheck: install
	$(BIN)/mypy

test: install
	$(BIN)/pytest $(PYTEST_ARGS)

# The container image (Dockerfile), cached by a hash of its inputs; docs/image.md.
image:
	image/build.sh

# The chart's unit tests run again once e2e/build.sh has built helm (`make test` skips them
# on a fresh clone, before it exists).
e2e: install image
	e2e/build.sh
	$(BIN)/pytest tests/install -p no:cacheprovider -q
	$(BIN)/pytest e2e -m e2e -p no:cacheprovider $(PYTEST_ARGS)

# Render manifests/ (the kustomize tree) from charts/migslice with e2e/.bin/helm.
manifests: install
	e2e/build.sh
	$(BIN)/python manifests/render.py

# The lab: bench/<suite>/, each with a README and one current report (report.md, .json, .png);
# docs/benchmarks.md is the index. The simulator's read the traces in ../shared/data (pass
# BENCH_ARGS='--data-dir DIR' to read them elsewhere).
BENCH_ARGS ?=

# The suites that need no control plane of their own (not bench-dra: its replays, about 80
# minutes; not bench-plane: 5,000 nodes).
bench: bench-latency bench-packing bench-serving

bench-install: install
	$(BIN)/pip install --quiet -e '.[bench]'

# The suites' own tests (bench/*/tests), apart from `make test`.
bench-test: bench-install
	$(BIN)/pytest bench -p no:cacheprovider $(PYTEST_ARGS)

bench-latency: bench-install
	nice $(BIN)/python -m bench.latency.extender_latency
	nice $(BIN)/python -m bench.latency.extender_cpu
	nice $(BIN)/python -m bench.latency.sync_memory
	nice $(BIN)/python -m bench.latency.policy_scale
	nice $(BIN)/python -m bench.latency.plan_scale
	nice $(BIN)/python -m bench.latency.webhook_latency
	e2e/build.sh
	nice $(BIN)/python -m bench.latency.webhook_latency --api --nodes 200 --pods 2000

bench-serving: bench-install
	nice $(BIN)/python -m bench.serving.slow_clients

# The packing suite: saturation, churn, carve mode, the exact optimum, the simulator's scale.
bench-packing: bench-saturation bench-sampling bench-churn bench-carve bench-exact bench-scale

bench-saturation: bench-install
	nice $(BIN)/python -m bench.packing.packing $(BENCH_ARGS)

# The packing suite's node sampling (its own section; about 3 minutes here).
bench-sampling: bench-install
	nice $(BIN)/python -m bench.packing.packing --percentage-of-nodes-to-score 100,0,50,30,20,10,1 \
		--seeds 5 --workloads default/M1,default/M2,gpushare100/M1,multigpu50/M1,synthetic $(BENCH_ARGS)

bench-churn: bench-install
	nice $(BIN)/python -m bench.packing.churn $(BENCH_ARGS)

bench-carve: bench-install
	nice $(BIN)/python -m bench.packing.carve $(BENCH_ARGS)

bench-exact: bench-install
	nice $(BIN)/python -m bench.packing.exact $(BENCH_ARGS)

bench-scale: bench-install
	nice $(BIN)/python -m bench.packing.scale $(BENCH_ARGS)

# Not in CI: 5,000 nodes and 40,000 pods on the e2e control plane (bench/plane/README.md);
# e.g. BENCH_CLUSTER_ARGS='--nodes 500 --run-pods 200 --label try'.
bench-plane: bench-install
	e2e/build.sh
	$(BIN)/python -m bench.plane.cluster $(BENCH_CLUSTER_ARGS)

# The DRA suite: first fit against migslice on a real control plane (about 80 minutes here),
# and the workers' memory at 1,000 DynamicMIG nodes (not in CI).
bench-dra: bench-install
	e2e/build.sh
	nice $(BIN)/python -m bench.dra.replay $(BENCH_ARGS)
	nice $(BIN)/python -m bench.dra.memory
	nice $(BIN)/python -m bench.dra.steer_cpu

bench-cluster: bench-plane

demo: install
	$(BIN)/migslice demo

example: install
	$(BIN)/migslice fit --gpu A100-80GB 3g.40gb 2g.20gb 1g.10gb

verify: lint typecheck test

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis image/.build
