# ipscheduler developer entry points. `make demo` and `make test` are the two
# commands a newcomer needs; see README.md.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
DEVCLUSTER_DIR ?= .devcluster
KUBECONFIG_DEV := $(DEVCLUSTER_DIR)/kubeconfig
KUBECTL := kubectl --kubeconfig $(KUBECONFIG_DEV)

.PHONY: test lint typecheck unit e2e demo down binaries crds clean bench cni cni-test
GO ?= go

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $@

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check operator tests hack
	$(VENV)/bin/ruff format --check operator tests hack
	$(VENV)/bin/lint-imports
	@test -z "$$(gofmt -l cni)" || { echo "gofmt would reformat:"; gofmt -l cni; exit 1; }
	cd cni && $(GO) vet ./...

typecheck: $(VENV)/.installed
	$(VENV)/bin/mypy

## test: lint, type-check and run every test, end-to-end ones included
test: lint typecheck binaries cni-test
	$(VENV)/bin/pytest

## cni: the node-side CNI IPAM plugin, a static binary in bin/ipscheduler-ipam
cni:
	cd cni && CGO_ENABLED=0 $(GO) build -trimpath -o ../bin/ipscheduler-ipam ./cmd/ipscheduler-ipam

## cni-test: the plugin's Go unit tests
cni-test:
	cd cni && $(GO) test -count=1 ./...

unit: $(VENV)/.installed
	$(VENV)/bin/pytest -m 'not e2e'

e2e: $(VENV)/.installed binaries
	$(VENV)/bin/pytest -m e2e

## binaries: build (first time, 15-25 min) or locate the control-plane binaries,
## the CNI tools, helm and promtool
binaries:
	$(PYTHON) hack/devcluster.py binaries
	$(PYTHON) hack/binaries.py tools

crds: $(VENV)/.installed
	$(PY) -m ipscheduler crd > crds/nodeippools.ipscheduler.io.yaml

## bench: ip-scheduler vs kube-scheduler side by side (BENCH_ARGS="--preset large" etc.)
BENCH_ARGS ?= --preset small
bench: $(VENV)/.installed binaries
	$(PY) hack/bench.py $(BENCH_ARGS)

## demo: local control plane + the scheduler running the examples
demo: $(VENV)/.installed
	$(PYTHON) hack/demo.py --dir $(DEVCLUSTER_DIR) --python $(PY)

## down: stop the demo scheduler and the local control plane
down:
	$(PYTHON) hack/demo.py --dir $(DEVCLUSTER_DIR) --down
	$(PYTHON) hack/devcluster.py down --dir $(DEVCLUSTER_DIR)

clean: down
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
