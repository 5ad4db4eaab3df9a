# memwork: two set-up commands for a fresh machine -- `make demo` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin
# extras installed into the venv: `dev` by default; CI adds `st` (torch CPU + sentence-transformers, the
# reference the default ONNX embedder is checked against)
EXTRAS ?= dev
STAMP   = $(VENV)/.memwork-installed-$(EXTRAS)
# pytest-xdist workers: 3 on the 2-core machines here, since a test often waits (a kernel, a server, a
# subprocess); measured with `make check`: 2 workers 125 s, 3 workers 104 s
JOBS   ?= 3

.PHONY: demo test check lint format docs bench install clean

# Python's bytecode cache on for every command make runs, even where the shell turns it off
# (PYTHONDONTWRITEBYTECODE=1): without it each test worker, `memwork` subprocess and report kernel
# compiles memwork again, and pytest rewrites every test module's asserts again (collection 17 s -> 6 s;
# `memwork status --help` 0.4 s -> 0.2 s). The caches land in __pycache__/, which git ignores.
unexport PYTHONDONTWRITEBYTECODE

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	@# a newer pip is a nicety: the venv's own pip installs the project too
	$(BIN)/pip install -q --upgrade pip || echo "pip upgrade failed; going on with the venv's pip" >&2
	@# setuptools' "Editable installation" notice is information, not a problem: kept off the first screen.
	@# Up to three tries: pip retries a refused connection but not a download cut off mid-file
	@# ("IncompleteRead"), which once failed a CI run here; a real error fails all three the same way.
	for try in 1 2 3; do \
	  PYTHONWARNINGS=ignore::UserWarning:setuptools.command.editable_wheel $(BIN)/pip install -q -e '.[$(EXTRAS)]' \
	    && break; \
	  [ $$try = 3 ] && exit 1; echo "pip install failed (try $$try of 3); trying again" >&2; sleep 5; \
	done
	touch $(STAMP)

install: $(STAMP)

## The main job on embedded defaults (no services to start, no variables to export).
demo: $(STAMP)
	$(BIN)/memwork demo

## The whole suite: lint, types, unit tests, integration tests on real servers, notebooks -- in parallel
## (pytest-xdist, one embedded PostgreSQL per worker), each test under the ini's per-test timeout.
test: lint
	$(BIN)/pytest -q -n $(JOBS) -p no:cacheprovider
	@# the report notebooks as tests (assert cells are the checks), in a throw-away workspace whose
	@# embedded PostgreSQL (started by the notebooks' kernels, which nbval kills) is stopped afterwards
	@# (MEMWORK_REPORT_DIR=off: a notebook run outside `memwork report` writes no run folder; the sample
	@# vectors are cached in that workspace too, so no run reads what an earlier one left)
	d=$$(mktemp -d /tmp/memwork-nbval.XXXXXX); MEMWORK_HOME=$$d MEMWORK_CACHE_DIR=$$d/cache MEMWORK_REPORT_DIR=off $(BIN)/pytest -q -p no:cacheprovider \
	  --nbval-lax notebooks/; rc=$$?; \
	  MEMWORK_HOME=$$d $(BIN)/memwork pgvector url --stop >/dev/null 2>&1; rm -rf $$d; exit $$rc

## The fast loop after every change (no servers, nothing slow): lint, types, and every test that needs
## neither a server nor a papermill kernel nor a kill -9 round.
check: lint
	MEMWORK_TEST_NO_SERVICES=1 $(BIN)/pytest -q -n $(JOBS) -p no:cacheprovider -rfE

lint: $(STAMP)
	$(BIN)/ruff check memwork tests benchmarks
	$(BIN)/ruff format --check memwork tests benchmarks
	@# types: settings in pyproject.toml [tool.mypy]
	$(BIN)/mypy memwork
	@# docs/cli.md, docs/usage.md's command list and docs/backends.md's tables are generated: fail when stale
	$(BIN)/python -m memwork.cli.docs --check

format: $(STAMP)
	$(BIN)/ruff format memwork tests benchmarks
	$(BIN)/ruff check --fix memwork tests benchmarks

## docs/cli.md, docs/usage.md's command list and docs/backends.md's tables, regenerated from the code.
docs: $(STAMP)
	$(BIN)/python -m memwork.cli.docs

bench: $(STAMP)
	$(BIN)/python benchmarks/defrag_bench.py

clean:
	rm -rf $(VENV) .memwork .pytest_cache
