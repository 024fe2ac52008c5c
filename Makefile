# The project's entry points. `make demo` and `make test` install what they need first.
SHELL := /bin/bash
VENV := .venv
BIN := $(VENV)/bin
INVENTORY ?= inventory/local
LOCAL_CLUSTER := $(BIN)/python bin/local-cluster
export PATH := $(abspath $(BIN)):$(PATH)
export ANSIBLE_CONFIG := $(abspath ansible.cfg)

.PHONY: deps demo up down status test test-unit test-integration lint

deps:
	scripts/install-deps

up: deps
	$(LOCAL_CLUSTER) up -i $(INVENTORY)

down:
	$(LOCAL_CLUSTER) down -i $(INVENTORY)

status:
	$(LOCAL_CLUSTER) status -i $(INVENTORY)

# The main job end to end on the local cluster: for now a 2-node `srun hostname` batch job.
demo: up
	eval "$$($(LOCAL_CLUSTER) env -i $(INVENTORY))" && scripts/demo-job

test: deps
	$(BIN)/pytest

test-unit: deps
	$(BIN)/pytest tests/unit

test-integration: deps
	$(BIN)/pytest tests/integration

lint: deps
	$(BIN)/pytest tests/test_lint.py
