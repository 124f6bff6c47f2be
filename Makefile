# Thin wrapper: every target installs what it needs into .venv first.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PYTEST_ARGS ?=
BENCH_CLUSTER_ARGS ?=

.PHONY: install lint typecheck test image e2e manifests bench bench-install bench-latency \
	bench-packing bench-churn bench-carve bench-exact bench-scale bench-cluster demo example \
	verify clean

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

e2e: install image
	e2e/build.sh
	$(BIN)/pytest e2e -m e2e -p no:cacheprovider $(PYTEST_ARGS)

# Render manifests/ (the kustomize tree) from charts/migslice with e2e/.bin/helm.
manifests: install
	e2e/build.sh
	$(BIN)/python manifests/render.py

# Benchmarks write bench/reports/; the simulator's read the traces in ../shared/data (pass
# BENCH_ARGS='--data-dir DIR' to read them elsewhere). docs/benchmarks.md says what each takes.
BENCH_ARGS ?=

bench: bench-latency bench-packing bench-churn bench-carve bench-exact bench-scale
	nice $(BIN)/python -m bench.slow_clients

bench-install: install
	$(BIN)/pip install --quiet -e '.[bench]'

bench-latency: bench-install
	nice $(BIN)/python -m bench.extender_latency
	nice $(BIN)/python -m bench.extender_cpu
	nice $(BIN)/python -m bench.sync_memory
	nice $(BIN)/python -m bench.policy_scale
	nice $(BIN)/python bench/webhook_latency.py
	e2e/build.sh
	nice $(BIN)/python bench/webhook_latency.py --api --nodes 200 --pods 2000

bench-packing: bench-install
	nice $(BIN)/python -m bench.packing $(BENCH_ARGS)

bench-churn: bench-install
	nice $(BIN)/python -m bench.churn $(BENCH_ARGS)

bench-carve: bench-install
	nice $(BIN)/python -m bench.carve $(BENCH_ARGS)

bench-exact: bench-install
	nice $(BIN)/python -m bench.exact $(BENCH_ARGS)

bench-scale: bench-install
	nice $(BIN)/python -m bench.scale $(BENCH_ARGS)

# Not in CI: 5,000 nodes and 40,000 pods on the e2e control plane (docs/benchmarks.md, "Control
# plane at scale"); e.g. BENCH_CLUSTER_ARGS='--nodes 500 --run-pods 200 --label try'.
bench-cluster: bench-install
	e2e/build.sh
	$(BIN)/python -m bench.cluster $(BENCH_CLUSTER_ARGS)

demo: install
	$(BIN)/migslice demo

example: install
	$(BIN)/migslice fit --gpu A100-80GB 3g.40gb 2g.20gb 1g.10gb

verify: lint typecheck test

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis image/.build
