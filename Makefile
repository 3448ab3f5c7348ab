# Newcomer commands: `make demo` (the main job on the local default) and `make test`.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
LOCALKUBE := PYTHONPATH=e2e $(PY) -m localkube
PYTEST_ARGS ?=

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

# pip's own output goes to a log, named when it fails.
$(VENV)/.installed: pyproject.toml
	@echo "venv: installing the package and its test extras into $(VENV) (log: $(VENV)/install.log)"
	@$(PYTHON) -m venv $(VENV) && start=$$SECONDS && \
	  { $(PY) -m pip install --upgrade pip && $(PY) -m pip install -e '.[test]'; } >$(VENV)/install.log 2>&1 \
	  || { echo "venv: pip failed; see $(VENV)/install.log"; tail -n 20 $(VENV)/install.log; exit 1; }; \
	  echo "venv: done in $$((SECONDS - start))s"
	@touch $@

venv: $(VENV)/.installed ## create the virtual environment with the package and its test extras

# The operator as a user installs it (`pip install .`, no test extras): what the scale bench
# runs and measures, with bytecode compiled as pip does by default. Reinstalled when the
# package's sources change.
PROD_VENV := .venv-prod
PROD_SOURCES := $(shell find etcd_operator etcd_operator_kubectl -name '*.py' 2>/dev/null)
$(PROD_VENV)/.installed: pyproject.toml $(PROD_SOURCES)
	@echo "venv-prod: installing the package without extras into $(PROD_VENV) (log: $(PROD_VENV)/install.log)"
	@[ -x $(PROD_VENV)/bin/python ] || $(PYTHON) -m venv $(PROD_VENV)
	@start=$$SECONDS && $(PROD_VENV)/bin/python -m pip install . >$(PROD_VENV)/install.log 2>&1 \
	  || { echo "venv-prod: pip failed; see $(PROD_VENV)/install.log"; tail -n 20 $(PROD_VENV)/install.log; exit 1; }; \
	  echo "venv-prod: done in $$((SECONDS - start))s"
	@touch $@

venv-prod: $(PROD_VENV)/.installed ## the production install (no test extras) that the scale bench measures

testbin: ## build the pinned kube-apiserver, controller-manager, kubectl, kubelet, kube-proxy, kube-scheduler, etcd 3.5/3.6, MinIO, helm, Prometheus and promtool, the OLM bundle validator, kustomize 5.0, 5.4 and 5.5, and the release's OCI registry, crane, syft and cosign
	@e2e/testbin/build.sh >/dev/null  # progress and the cache directory go to stderr

# What `make up` and `make demo` run: no etcd 3.5, Prometheus or linearizability checker
# (`make test` and `make bench` build those).
UP_RECIPES := kube nodes etcd-3.6 minio coredns local-path-provisioner helm
testbin-up:
	@e2e/testbin/build.sh $(UP_RECIPES) >/dev/null

host-packages: ## install the Debian packages the local default needs (as root; otherwise prints the command)
	@hack/host-packages.sh

# Three real nodes (containerd, runc, kubelet, kube-proxy in network namespaces; e2e/README.md).
up: host-packages venv testbin-up ## start the local control plane, MinIO and three real nodes; harmless when up
	@$(LOCALKUBE) up

down: venv ## stop everything the local default started, and the tests' substrates (PURGE=1: delete their data too)
	@$(LOCALKUBE) down $(if $(PURGE),--purge)

status: venv ## show the local substrate's components
	@$(LOCALKUBE) status

crds: up ## install the CRDs into the current cluster
	@source .localkube/env && kubectl apply --server-side -k crds/ >/dev/null && \
	  kubectl wait --for=condition=Established crd --all --timeout=60s >/dev/null

run: venv ## run the operator against the current KUBECONFIG
	$(PY) -m etcd_operator

test: host-packages venv testbin ## lint and types first, then unit tests and the simulator beside the tests against the local control plane
	@PYTHON=$(PY) tests/run.sh $(PYTEST_ARGS)

lint: venv ## ruff (lint and format), mypy (strict over the pure core) and the import layers, what `make test` runs first
	@$(PY) -m ruff check .
	@$(PY) -m ruff format --check .
	@$(PY) hack/typecheck.py
	@$(VENV)/bin/lint-imports --no-cache

format: venv ## apply ruff's fixes and formatting
	@$(PY) -m ruff check --fix .
	@$(PY) -m ruff format .

test-unit: venv ## the pure unit tests and the fault simulator (no substrate, and nothing of the harness in e2e/)
	@$(PY) -m pytest tests/unit tests/sim $(PYTEST_ARGS)

bench: host-packages venv venv-prod testbin ## benchmarks: cluster timings, backup throughput and memory, restore overhead
	@PYTHONPATH=.:e2e BENCH_OPERATOR_PYTHON=$(PROD_VENV)/bin/python $(PY) -m bench $(BENCH)

e2e-kind: venv ## the e2e scenarios on a kind cluster, in external mode (needs Docker and kind)
	@e2e/kind.sh

image: venv ## the operator's OCI image archive, without Docker (needs mmdebstrap)
	@packaging/image/build.sh

release: venv ## the release artifacts of HEAD into build/release (chart, kubectl-etcd wheel and krew archive, lock file, SHA256SUMS); docs/operations/releasing.md
	@packaging/release.sh $(RELEASE_DIR)

images: venv testbin ## the images real nodes run (pause, etcd, busybox, operator) as OCI archives
	@PYTHONPATH=e2e $(PY) -m images build

chart-crds: ## write the chart's CRD templates from crds/ and copy the alerting rules into it (tests/unit/test_chart_crds.py, tests/unit/test_runbook_urls.py check they match)
	@$(PYTHON) hack/chart_crds.py
	@cp deploy/monitoring/prometheusrules.yaml charts/etcd-operator/files/

docs: venv ## regenerate docs/reference/fields.md from crds/ (tests/unit/test_docs_fields_reference.py checks it)
	@$(PY) hack/crd_reference.py

bundle: venv ## the OLM bundle (registry+v1) in build/bundle/, generated from crds/, deploy/ and examples/ (docs/install.md#olm)
	@$(PY) hack/olm_bundle.py >/dev/null

demo: up crds ## the main job on the local default: real nodes, the operator installed by the chart, a cluster and its backups
	@e2e/demo.sh

.PHONY: help venv venv-prod testbin testbin-up host-packages up down status crds run test lint format test-unit bench e2e-kind image images release chart-crds docs bundle demo
