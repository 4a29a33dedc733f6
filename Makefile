# colocation: set up and run everything from a fresh clone.
#   make run    the sandbox: an in-memory Kubernetes API with the project installed
#   make test   lint, type-check, build the docs, helm lint the chart, and every test: unit, e2e against the sandbox, and e2e against the
#               real control plane (built from Go modules by `make kube`; skipped, with a line
#               that says so, where Go is missing)
SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
SANDBOX_DIR ?= .sandbox
PYTEST_ARGS ?=
# Unit tests run in this many processes (pytest-xdist): each is independent and CPU-bound. Within a
# suite the e2e tests run one at a time (several sandboxes at once would share the cores they time);
# `make test` runs the sandbox suite and the real control plane suite side by side
# (scripts/e2e-both.sh): each mostly waits, a third of a core busy.
UNIT_JOBS ?= 2

KUBE_BUILD := hack/kube/build.sh
HELM_BUILD := hack/helm/build.sh
NATS_BUILD := hack/nats/build.sh
PROMETHEUS_BUILD := hack/prometheus/build.sh
CERT_MANAGER_BUILD := hack/cert-manager/build.sh
METRICS_SERVER_BUILD := hack/metrics-server/build.sh
IMAGE_BUILD := hack/image/build.sh
CHART := charts/colocation

.PHONY: help venv run test lint typecheck docs unit fuzz e2e e2e-kube kube kubectl-ready helm nats prometheus cert-manager metrics-server image chart bench e2e-kind clean

help:  ## show the targets
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

# The product and the sandbox (sandbox/: its own distribution, colocation-sandbox, which adds
# `colocation sandbox`), both editable, in one resolve: the sandbox's requirement on `colocation` is
# the checkout, never a package index's.
$(STAMP): pyproject.toml sandbox/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test,bench]' -e ./sandbox
	touch $(STAMP)

venv: $(STAMP)  ## create .venv with the package, the sandbox and their test tools

run: $(STAMP)  ## run the sandbox (API server + project installed); Ctrl-C stops it
	$(BIN)/colocation sandbox --state-dir $(SANDBOX_DIR) --log-format text

lint: $(STAMP)  ## ruff, and import-linter's layer contracts (pyproject.toml)
	$(BIN)/ruff check operator sandbox tests benchmarks
	cd operator && $(abspath $(BIN))/lint-imports --config ../pyproject.toml --no-cache

typecheck: $(STAMP)  ## mypy, strict on the package, the sandbox, the tests and the benchmarks
	$(BIN)/mypy
	$(BIN)/mypy tests benchmarks

# mkdocs.yml: strict, so a link to a missing page or heading anchor in docs/ fails the build.
docs: $(STAMP)  ## build the docs site strictly (mkdocs build --strict) into site/
	$(BIN)/mkdocs build --strict

# The timed pipelines (tests that start processes and judge their timing) run alone, after the
# parallel run: an xdist worker beside them would take the cores they time.
unit: $(STAMP)  ## unit tests only: in parallel, then the timed pipelines alone
	$(BIN)/pytest tests/unit -n $(UNIT_JOBS) -m "not timed_pipeline" $(PYTEST_ARGS)
	$(BIN)/pytest tests/unit -m timed_pipeline $(PYTEST_ARGS)

COLOCATION_FUZZ_EXAMPLES ?= 5000
fuzz: $(STAMP)  ## the report-path and read-path fuzz tests with a long budget (COLOCATION_FUZZ_EXAMPLES)
	COLOCATION_FUZZ_EXAMPLES=$(COLOCATION_FUZZ_EXAMPLES) $(BIN)/pytest tests/unit/nodemetrics/test_report_fuzz.py \
	  tests/unit/apiserver/test_read_fuzz.py -p no:cacheprovider --timeout 3600 $(PYTEST_ARGS)

e2e: $(STAMP) kubectl-ready  ## e2e tests against a fresh sandbox (or KUBECONFIG_E2E=path for a real cluster)
	$(BIN)/pytest tests/e2e $(if $(KUBECONFIG_E2E),--kubeconfig $(KUBECONFIG_E2E)) $(PYTEST_ARGS)

kube:  ## build the real control plane from its Go modules (cached in ~/.cache/colocation; cold: minutes)
	@time $(KUBE_BUILD) >/dev/null

# kubectl comes from the control-plane build (the same version as the API server it is tested
# against); without Go, the one on the PATH is used, and without either the kubectl tests skip.
kubectl-ready:
	@if command -v go >/dev/null; then $(MAKE) --no-print-directory kube; \
	elif ! command -v kubectl >/dev/null; then \
	  echo "note: neither Go nor kubectl here: manifests tests and kubectl e2e tests will be skipped"; fi

e2e-kube: $(STAMP) kubectl-ready  ## e2e tests against the real control plane (`colocation sandbox --apiserver kube`)
	@if command -v go >/dev/null; then $(BIN)/pytest tests/e2e --apiserver kube $(PYTEST_ARGS); \
	else echo "skip: e2e against the real control plane: Go 1.26 is not installed, so it cannot be built"; fi

test: lint typecheck docs kubectl-ready chart nats prometheus cert-manager metrics-server image unit  ## everything CI runs: lint, types, docs, unit, e2e on the sandbox and on the real control plane
	BIN=$(BIN) scripts/e2e-both.sh $(PYTEST_ARGS)

helm:  ## build helm 4 from its Go module (cached in ~/.cache/colocation; cold: about 4 minutes)
	@time $(HELM_BUILD) >/dev/null

# The NodeMetric store's tests on NATS JetStream (tests/unit/jetstream) skip, saying so, without it.
nats:  ## build nats-server from its Go module (cached in ~/.cache/colocation; cold: about 35 s), where Go is installed
	@if command -v go >/dev/null; then time $(NATS_BUILD) >/dev/null; \
	else echo "skip: nats-server: Go 1.26 is not installed, so it cannot be built"; fi

# The alerts' promtool tests (tests/unit/manifests) and the dashboard's e2e test skip, saying so, without it.
prometheus:  ## build prometheus and promtool from their Go module (cached in ~/.cache/colocation), where Go is installed
	@if command -v go >/dev/null; then time $(PROMETHEUS_BUILD) >/dev/null; \
	else echo "skip: prometheus and promtool: Go 1.26 is not installed, so they cannot be built"; fi

# tests/e2e/test_cert_manager.py skips, saying so, without it.
cert-manager:  ## build cert-manager's controller and cainjector (ours, over its v1.21.2 packages; cached in ~/.cache/colocation)
	@if command -v go >/dev/null; then time $(CERT_MANAGER_BUILD) >/dev/null; \
	else echo "skip: cert-manager: Go 1.26 is not installed, so it cannot be built"; fi

# The metrics-server e2e test and `colocation sandbox --apiserver kube --metrics-server` need it.
metrics-server:  ## build metrics-server from its Go module (cached in ~/.cache/colocation), where Go is installed
	@if command -v go >/dev/null; then time $(METRICS_SERVER_BUILD) >/dev/null; \
	else echo "skip: metrics-server: Go 1.26 is not installed, so it cannot be built"; fi

# The image's e2e tests (tests/e2e/test_image.py, on the real control plane) skip, saying so, without it.
image:  ## build the image colocation:dev with buildah (as root) and export it as an OCI archive in ~/.cache/colocation/image
	@if why="$$($(IMAGE_BUILD) --can-build)"; then time $(IMAGE_BUILD) >/dev/null; \
	else echo "skip: the image: $$why"; fi

# helm lint and helm template on the chart, with every optional feature off and on; the unit tests
# (tests/unit/charts) compare what it renders with manifests/.
chart:  ## helm lint and helm template on charts/colocation (skipped, saying so, where Go is missing)
	@if command -v go >/dev/null; then \
	  $(MAKE) --no-print-directory helm; helm="$$($(HELM_BUILD))"; \
	  for features in "" "features.resourceMetrics=true,features.customMetrics=true,features.nodeQoSEnforcement=true"; do \
	    "$$helm" lint --strict $(CHART) $${features:+--set $$features}; \
	    "$$helm" template colocation $(CHART) $${features:+--set $$features} >/dev/null; \
	  done; echo "chart: helm lint and helm template passed"; \
	else echo "skip: helm lint and helm template of $(CHART): Go 1.26 is not installed, so helm cannot be built"; fi

bench: $(STAMP)  ## benchmarks; writes BENCHMARKS.md
	$(BIN)/python -m benchmarks.run

e2e-kind: $(STAMP)  ## e2e against a kind cluster (needs Docker and kind)
	scripts/e2e-kind.sh

clean:  ## remove the virtualenv, the sandbox state and the docs site
	rm -rf $(VENV) $(SANDBOX_DIR) site .pytest_cache .mypy_cache .ruff_cache
