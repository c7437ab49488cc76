# The one entry point: CI, the README and developers run these targets.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PROTOS := $(wildcard proto/durable/v1/*.proto)
GEN_DIR := sidecar/src

# `make run` defaults: the local PostgreSQL and Redis, and a development token.
export DURABLE_DATABASE_URL ?= postgresql://postgres@127.0.0.1:5432/durable
export DURABLE_AUTH_TOKENS ?= dev-token-change-me=default

.PHONY: setup proto proto-check lint test run run-sidecar clean help

help:
	@echo "make setup        create $(VENV) with the sidecar and its tools"
	@echo "make test         run the test suite against PostgreSQL and Redis"
	@echo "make lint         ruff and mypy --strict"
	@echo "make proto        regenerate gRPC code from proto/"
	@echo "make proto-check  fail when generated code differs from proto/"
	@echo "make run          start the sidecar in the foreground (creates the database if missing)"

setup: $(VENV)/.installed

$(VENV)/.installed: sidecar/pyproject.toml requirements-dev.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -r requirements-dev.txt -e sidecar
	touch $@

# Pinned by grpcio-tools in requirements-dev.txt: the one command that generates code.
define protoc
	$(BIN)/python -m grpc_tools.protoc -Iproto --python_out=$(1) --pyi_out=$(1) --grpc_python_out=$(1) $(PROTOS)
endef

proto: setup
	$(call protoc,$(GEN_DIR))

proto-check: setup
	@tmp=$$(mktemp -d) && trap 'rm -rf $$tmp' EXIT && $(call protoc,$$tmp) && \
	  for f in $$(cd $$tmp && find durable -name '*.py' -o -name '*.pyi' | sort); do \
	    cmp -s $$tmp/$$f $(GEN_DIR)/$$f || { echo "proto-check: $(GEN_DIR)/$$f is out of date: run make proto"; exit 1; }; \
	  done && \
	  for f in $$(cd $(GEN_DIR) && find durable -name '*_pb2*.py*' | sort); do \
	    test -f $$tmp/$$f || { echo "proto-check: $(GEN_DIR)/$$f has no .proto source: delete it"; exit 1; }; \
	  done && echo "proto-check: generated code matches proto/"

lint: setup
	$(BIN)/ruff check sidecar/src tests
	$(BIN)/mypy

test: setup
	$(BIN)/python -m pytest $(PYTEST_ARGS)

run: setup
	@$(BIN)/python -c "import psycopg, sys, urllib.parse as u; url = sys.argv[1]; name = u.urlparse(url).path.lstrip('/'); \
	  admin = url.rsplit('/', 1)[0] + '/postgres'; c = psycopg.connect(admin, autocommit=True); \
	  exists = c.execute('SELECT 1 FROM pg_database WHERE datname = %s', (name,)).fetchone(); \
	  exists or c.execute('CREATE DATABASE \"%s\"' % name); print('database', name, 'ready')" "$$DURABLE_DATABASE_URL"
	@echo "sidecar on $${DURABLE_LISTEN_ADDRESS:-127.0.0.1:50051}, metrics on http://$${DURABLE_METRICS_ADDRESS:-127.0.0.1:9464}/metrics; Ctrl-C stops it"
	$(BIN)/durable-sidecar serve

run-sidecar: run

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
