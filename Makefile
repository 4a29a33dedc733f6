# colocation: set up and run everything from a fresh clone.
#   make run    the sandbox: an in-memory Kubernetes API with the project installed
#   make test   lint, type-check and every test (unit, and e2e against the sandbox)
SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
SANDBOX_DIR ?= .sandbox
PYTEST_ARGS ?=

.PHONY: help venv run test lint typecheck unit e2e bench e2e-kind clean

help:  ## show the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml
	@command -v kubectl >/dev/null || echo "note: kubectl not found; the kubectl e2e tests will be skipped"
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test,bench]'
	touch $(STAMP)

venv: $(STAMP)  ## create .venv with the package and its test tools

run: $(STAMP)  ## run the sandbox (API server + project installed); Ctrl-C stops it
	$(BIN)/colocation sandbox --state-dir $(SANDBOX_DIR) --log-format text

lint: $(STAMP)  ## ruff
	$(BIN)/ruff check operator tests benchmarks

typecheck: $(STAMP)  ## mypy, strict on the package
	$(BIN)/mypy

unit: $(STAMP)  ## unit tests only
	$(BIN)/pytest tests/unit $(PYTEST_ARGS)

e2e: $(STAMP)  ## e2e tests against a fresh sandbox (or KUBECONFIG_E2E=path for a real cluster)
	$(BIN)/pytest tests/e2e $(if $(KUBECONFIG_E2E),--kubeconfig $(KUBECONFIG_E2E)) $(PYTEST_ARGS)

test: lint typecheck  ## everything CI runs: lint, types, unit and e2e tests
	$(BIN)/pytest tests/unit tests/e2e $(PYTEST_ARGS)

bench: $(STAMP)  ## benchmarks; writes BENCHMARKS.md
	$(BIN)/python -m benchmarks.run

e2e-kind: $(STAMP)  ## e2e against a kind cluster (needs Docker and kind)
	scripts/e2e-kind.sh

clean:  ## remove the virtualenv and sandbox state
	rm -rf $(VENV) $(SANDBOX_DIR) .pytest_cache .mypy_cache .ruff_cache
