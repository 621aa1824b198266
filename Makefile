# The two commands of the README:
#   make quickstart   installs Ferret into .venv and runs the main job on the embedded default (no server)
#   make test         installs what the tests need (PostgreSQL and redis-server from Debian, dev extras)
#                     and runs lint, type checks and the test suite
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1

.PHONY: install quickstart system-deps lint test test-all

$(BIN)/ferret: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	# torch first and pinned: an unpinned torch pulls several GB of CUDA wheels.
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e ".[dev]"
	touch $@

install: $(BIN)/ferret

quickstart: install
	$(BIN)/ferret quickstart

# Real services for the integration tests; the suite starts them itself on 127.0.0.1.
system-deps:
	@if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || ! command -v redis-server >/dev/null; then \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq postgresql redis-server >/dev/null; \
	fi

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

test: install system-deps lint
	$(BIN)/python -m pytest -m "not gpu"

test-all: install system-deps
	$(BIN)/python -m pytest
