# The project's entry points. `make demo` and `make test` install what they need first.
SHELL := /bin/bash
VENV := .venv
BIN := $(VENV)/bin
INVENTORY ?= inventory/local
LOCAL_CLUSTER := $(BIN)/python bin/local-cluster
export PATH := $(abspath $(BIN)):$(PATH)
export ANSIBLE_CONFIG := $(abspath ansible.cfg)

.PHONY: deps demo up down status test test-unit test-integration lint mutation

deps:
	scripts/install-deps

up: deps
	$(LOCAL_CLUSTER) up -i $(INVENTORY)

down:
	$(LOCAL_CLUSTER) down -i $(INVENTORY)

status:
	$(LOCAL_CLUSTER) status -i $(INVENTORY)

# The main job end to end on the local cluster: provision CUDA, conda and the NCCL env (a
# no-op the second time), then examples/train_ddp.py across both nodes, 2 processes each
# (gloo on CPU), followed to its end, outputs in outputs/.
demo: up
	$(BIN)/ansible-playbook -i $(INVENTORY) provision.yml
	$(BIN)/ansible-playbook -i $(INVENTORY) launch.yml -e nodes=node110,node111 \
	  -e script=examples/train_ddp.py -e nproc_per_node=2 -e '{"script_args": "--steps 30 --log-every 10"}'

test: deps
	$(BIN)/pytest

test-unit: deps
	$(BIN)/pytest tests/unit

test-integration: deps
	$(BIN)/pytest tests/integration

lint: deps
	$(BIN)/pytest tests/test_lint.py

# The benchmark suite (docs/benchmarks.md): brings up its own clusters from bench/inventory,
# measures each figure against a baseline of the same run, prints the table and writes it to
# bench/results/ as JSON. Not part of `make test`. A subset, quickly:
#   make bench BENCH_ARGS='--only answer --reps 1 --long-seconds 0'
.PHONY: bench
BENCH_ARGS ?=
bench: deps
	$(BIN)/python bench/run.py $(BENCH_ARGS)

# Mutation testing (README): each target file of scripts/mutation.toml made wrong one small way
# at a time, its unit tests run against each wrong version; prints each file's score and the
# survivors, writes outputs/mutation/report.json. Not part of `make test`. One file, quickly:
#   make mutation MUTATE=library/nccl_network_facts.py
MUTATE ?=
mutation: deps
	@want=$$(sha256sum requirements-dev.txt | cut -d' ' -f1); \
	if [[ "$$(cat $(VENV)/.requirements-dev.sha256 2>/dev/null)" != "$$want" ]]; then \
	  $(BIN)/pip install -q --disable-pip-version-check -r requirements-dev.txt && \
	  echo "$$want" > $(VENV)/.requirements-dev.sha256; fi
	$(BIN)/python scripts/mutation.py $(MUTATE)
