# ipscheduler developer entry points. `make demo` and `make test` are the two
# commands a newcomer needs; see README.md.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
DEVCLUSTER_DIR ?= .devcluster
KUBECONFIG_DEV := $(DEVCLUSTER_DIR)/kubeconfig
KUBECTL := kubectl --kubeconfig $(KUBECONFIG_DEV)

.PHONY: test lint typecheck unit e2e demo down binaries crds clean bench cni cni-test deploy undeploy helm chart-docs images
GO ?= go
# One version for the package (pyproject.toml reads the same file), the images,
# the Helm chart and the CNI binary.
VERSION := $(shell cat VERSION)
# The images `make deploy` puts into deploy/'s manifests (name:tag or name@digest).
IMG ?= ipscheduler:$(VERSION)
IPAM_IMG ?= ipscheduler-ipam:$(VERSION)
# deploy/undeploy act on kubectl's current context (not the dev cluster's kubeconfig).
DEPLOY_KUBECTL ?= kubectl

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

# pytest's parallel workers (pytest-xdist) for `make test` and `make e2e`: each worker that
# runs end-to-end tests starts its own dev cluster; a test file stays on one worker (its
# module fixtures start once). PYTEST_WORKERS=0 runs everything in this one process.
PYTEST_WORKERS ?= 4
PYTEST_PARALLEL := -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder

## test: lint, type-check and run every test, end-to-end ones included (in parallel workers)
test: lint typecheck binaries cni-test
	$(VENV)/bin/pytest $(PYTEST_PARALLEL)

## cni: the node-side CNI IPAM plugin, a static binary in bin/ipscheduler-ipam, stamped with VERSION
## (CNI_OUT=path: elsewhere). `ipscheduler-ipam` without CNI_COMMAND prints the version.
CNI_OUT ?= bin/ipscheduler-ipam
CNI_LDFLAGS := -X github.com/ipscheduler/ipscheduler/cni/internal/ipam.Version=$(VERSION)
cni:
	cd cni && CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(CNI_LDFLAGS)" -o $(abspath $(CNI_OUT)) ./cmd/ipscheduler-ipam

## cni-test: the plugin's Go unit tests
cni-test:
	cd cni && $(GO) test -count=1 ./...

unit: $(VENV)/.installed
	$(VENV)/bin/pytest -m 'not e2e'

e2e: $(VENV)/.installed binaries
	$(VENV)/bin/pytest -m e2e $(PYTEST_PARALLEL)

## binaries: build (first time, 15-25 min) or locate the control-plane binaries,
## the CNI tools, helm, promtool and prometheus; as root also a real node's (kubelet,
## containerd, runc, crictl, pause; 10-15 min more the first time) and its two images
binaries:
	$(PYTHON) hack/devcluster.py binaries
	$(PYTHON) hack/binaries.py tools
	if [ "$$(id -u)" = 0 ]; then $(PYTHON) hack/binaries.py node; fi

## images: ipscheduler:$(VERSION) and ipscheduler-ipam:$(VERSION) from the two Dockerfiles, built
## here with BuildKit (as root; no registry: the bases are made from Debian's packages and this
## machine's Go) into dist/<image>-$(VERSION).oci.tar with an SPDX SBOM beside each;
## IMAGES_ARGS="--no-cache" rebuilds every step. First time about 12 min (BuildKit, syft,
## bases), then about a minute; see hack/images.py.
IMAGES_ARGS ?=
images:
	$(PYTHON) hack/images.py build --version $(VERSION) $(IMAGES_ARGS)

## deploy: the CRD, then deploy/ (kustomize) with the images IMG and IPAM_IMG, to kubectl's
## current context: make deploy IMG=registry.example/ipscheduler:$(VERSION)
deploy:
	$(DEPLOY_KUBECTL) apply -f crds/
	set -o pipefail; deploy/render.sh "$(IMG)" "$(IPAM_IMG)" | $(DEPLOY_KUBECTL) apply -f -

## undeploy: delete what deploy/ created (the CRD and its NodeIPPools stay: kubectl delete -f crds/)
undeploy:
	$(DEPLOY_KUBECTL) delete -k deploy/ --ignore-not-found

## helm: lint the chart (deploy/chart/ipscheduler) and package it into bin/
helm:
	helm=$$($(PYTHON) hack/binaries.py helm) && \
	  $$helm lint --strict deploy/chart/ipscheduler && \
	  $$helm package deploy/chart/ipscheduler --destination bin/

## chart-docs: write the chart's README.md from its values' `# --` comments (helm-docs,
## built once by hack/binaries.py) and copy deploy/monitoring's rules and dashboard into the
## chart's files/ (tests/unit/test_packaging.py fails while either is stale)
chart-docs:
	cp deploy/monitoring/dashboard.json deploy/monitoring/prometheusrule.yaml deploy/chart/ipscheduler/files/
	helm_docs=$$($(PYTHON) hack/binaries.py helm-docs) && \
	  $$helm_docs --chart-search-root deploy/chart --skip-version-footer

## crds: regenerate the CRD from the models, and the Helm chart's copy of it
crds: $(VENV)/.installed
	$(PY) -m ipscheduler crd > crds/nodeippools.ipscheduler.io.yaml
	$(PY) -m ipscheduler crd podgroups > crds/podgroups.scheduling.x-k8s.io.yaml
	cp crds/nodeippools.ipscheduler.io.yaml crds/podgroups.scheduling.x-k8s.io.yaml deploy/chart/ipscheduler/crds/

## bench: ip-scheduler vs kube-scheduler side by side (BENCH_ARGS="--preset large" etc.)
BENCH_ARGS ?= --preset small
bench: $(VENV)/.installed binaries
	$(PY) -m hack.bench $(BENCH_ARGS)

## demo: local control plane + the scheduler running the examples
## (REAL_NODES=0: kwok nodes only, no containerd + kubelet node even as root)
REAL_NODES ?= 1
demo: $(VENV)/.installed
	$(PYTHON) hack/demo.py --dir $(DEVCLUSTER_DIR) --python $(PY) $(if $(filter 0,$(REAL_NODES)),--no-real-node)

## down: stop the demo scheduler and the local control plane
down:
	$(PYTHON) hack/demo.py --dir $(DEVCLUSTER_DIR) --down
	$(PYTHON) hack/devcluster.py down --dir $(DEVCLUSTER_DIR)

clean: down
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
