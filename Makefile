# The project's verbs. `make help` lists them. Every target installs what it needs first.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
LH     := $(BIN)/lakehouse

.DEFAULT_GOAL := help
.PHONY: help setup demo demo-cluster test test-faults test-unit lint bench clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

$(BIN)/activate:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed: pyproject.toml | $(BIN)/activate
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

setup: $(VENV)/.installed ## install Python deps, the pinned JVM jars and Chromium (idempotent)
	$(LH) setup
	bash scripts/install-chromium.sh

demo: setup ## the whole pipeline on local services: Kafka -> bronze -> silver -> gold, checks, SQL
	bash scripts/demo.sh

demo-cluster: setup ## the demo with every job on a local Spark cluster and every table on local S3
	LAKEHOUSE_TARGET=local-cluster bash scripts/demo.sh

# The tests' CLI runs map the classes their JVMs load from archives in CDS_DIR of
# tests/support (made by tests/support/cds.py); this file says they were made.
CDS := .state/cds/made
$(CDS): $(VENV)/.installed jvm/pom.xml | setup
	rm -rf .state/cds
	$(BIN)/python -m tests.support.cds
	touch $@

# TEST_WORKERS pytest processes side by side, a module at a time, each with its own broker,
# metastore and Spark: first the tests that kill nothing, longest first (the order is
# tests/conftest.py's), then the fault tests by themselves, away from the modules that keep
# both cores busy (docs/testing.md).
TEST_WORKERS ?= 2
SIDE_BY_SIDE := -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder
test: setup $(CDS) ## run the whole test suite against a real broker, Spark and Delta
	$(BIN)/pytest $(SIDE_BY_SIDE) -m "not faults"
	$(BIN)/pytest $(SIDE_BY_SIDE) -m faults

test-faults: setup $(CDS) ## only the tests that kill a server, a worker or a job mid-run
	$(BIN)/pytest -m faults

test-unit: setup ## only the tests that need no broker or Spark
	$(BIN)/pytest -m "not integration"

lint: setup ## pre-commit hooks: hygiene, ruff, mypy
	$(BIN)/pre-commit run --all-files

bench: setup ## benchmarks: each layer against its baseline
	$(BIN)/python -m benchmarks.bronze
	$(BIN)/python -m benchmarks.silver
	$(BIN)/python -m benchmarks.codegen_cache
	$(BIN)/python -m benchmarks.batch_values
	$(BIN)/python -m benchmarks.fixed
	$(BIN)/python -m benchmarks.quality
	$(BIN)/python -m benchmarks.gold
	$(BIN)/python -m benchmarks.latency
	$(BIN)/python -m benchmarks.platforms

clean: ## stop the embedded services and delete local state (tables, checkpoints, their data)
	-$(LH) kafka stop
	-$(LH) s3 stop
	-$(LH) catalog stop
	-$(LH) cluster stop
	rm -rf .state/lake .state/kafka .state/s3 .state/catalog .state/cluster .state/dist
