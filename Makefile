# Two commands do everything on a fresh clone:
#   make serve   build the documentation site and serve it at http://127.0.0.1:8000
#                (it prints each page's examples as they run; an unchanged example's
#                output comes from .cache/exec, see overrides/build_cache.py)
#   make test    type-check (mypy --strict), then run the whole test suite (unit, processes, docs-as-tests, strict build, browser)
# Each creates .venv and installs the pinned dependencies it needs by itself.
# For contributors, between two edits:
#   make check   type-check, then the fast tests on SQLite (no PostgreSQL, no browser, no slow proof runs)
# For authors, while writing pages:
#   make live    mkdocs serve with the same cache: the page reloads on every save
# For readers who want to run the documentation itself:
#   make docs-test   every page's blocks, shell sessions and snippet programs, in .venv-docs

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
PIP    := $(BIN)/python -m pip install --quiet --disable-pip-version-check -c constraints.txt
HOST   ?= 127.0.0.1
PORT   ?= 8000
export NO_MKDOCS_2_WARNING := 1
# Python keeps the modules it compiles (__pycache__/, ignored by git), even where the
# environment says not to (PYTHONDONTWRITEBYTECODE, set on some CI machines): the tests
# start thousands of Python processes, and each would compile the project's modules
# again (and each pytest worker rewrite every test module's asserts again).
unexport PYTHONDONTWRITEBYTECODE

.PHONY: test check docs-test serve live site bench clean

$(BIN)/python:
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "queue_core needs Python >= 3.11; run: make PYTHON=python3.12 ...")'
	$(PYTHON) -m venv $(VENV)

$(VENV)/.docs-installed: $(BIN)/python requirements-docs.txt constraints.txt pyproject.toml
	$(PIP) -r requirements-docs.txt
	$(PIP) -e .
	@touch $@

$(VENV)/.test-installed: $(VENV)/.docs-installed requirements-test.txt
	$(PIP) -r requirements-test.txt
	@touch $@

# axe-core, pinned with its integrity in tests/browser/package-lock.json, for the
# browser test's accessibility check (npm ci installs exactly the locked version).
AXE := tests/browser/node_modules/axe-core/axe.min.js
$(AXE): tests/browser/package.json tests/browser/package-lock.json
	npm ci --prefix tests/browser --no-audit --no-fund --loglevel=error
	@touch $@

# Pyodide, pinned with its integrity in site_runtime/package-lock.json: the
# build copies it into the site for the Run buttons (overrides/hooks.py).
PYODIDE := site_runtime/node_modules/pyodide/pyodide.asm.wasm
$(PYODIDE): site_runtime/package.json site_runtime/package-lock.json
	npm ci --prefix site_runtime --no-audit --no-fund --loglevel=error
	@touch $@

# The tests run on WORKERS processes (pytest-xdist; tests that share an expensive
# fixture stay on one worker: tests/conftest.py). WORKERS=0 runs them in this one.
# Two more than the CPUs: many tests wait (for a lease to end, a timeout, a page to
# settle), and the extra workers use that time.
WORKERS ?= $(shell $(PYTHON) -c 'import os; print(len(os.sched_getaffinity(0)) + 2)')
# (= not :=, so that WORKERS is worked out only by the targets that run tests)
# --no-loadscope-reorder: the workers take the tests in the order tests/conftest.py gives them
# (start_order: the long ones first), not pytest-xdist's order of the biggest groups first.
XDIST    = -n $(WORKERS) --dist loadgroup --no-loadscope-reorder
# The tests' temporary files (SQLite files, each worker's PostgreSQL cluster, the site
# builds) go to memory, /dev/shm, when it has 4 GiB free: the tests make and delete
# thousands of files, and a disk's file system spends kernel time on each (a PostgreSQL
# database made and dropped per test costs several times more on a disk). Nothing a test
# proves depends on a disk: the power cuts and I/O errors have a file system of their own
# (proof/powerfs.py). `make test TEST_TMPDIR=` keeps the system's temporary folder.
TEST_TMPDIR ?= $(shell $(PYTHON) -c 'import os, shutil; print("/dev/shm" if os.path.isdir("/dev/shm") and shutil.disk_usage("/dev/shm").free >= 4 << 30 else "")')
IN_TMPDIR    = $(if $(TEST_TMPDIR),TMPDIR=$(TEST_TMPDIR))

test: $(VENV)/.test-installed $(AXE) $(PYODIDE)
	$(BIN)/python -m mypy
	$(IN_TMPDIR) $(BIN)/python -m pytest $(XDIST)

# Markers set in tests/conftest.py: `postgres` (needs the throwaway server),
# `slow` (real browsers, builds, crash and chaos runs, packaging, benchmarks).
check: $(VENV)/.test-installed
	$(BIN)/python -m mypy
	$(IN_TMPDIR) $(BIN)/python -m pytest -q $(XDIST) -m "not slow and not postgres"

site: $(VENV)/.docs-installed $(PYODIDE)
	$(BIN)/python -m mkdocs build --strict --site-dir site

# The site's own URL (canonical links, sitemap, instant navigation) is where it is served.
# `make serve` and `make live` keep the executed examples' outputs in EXEC_CACHE
# (overrides/build_cache.py, docs_support/exec_cache.py): an example whose source,
# repository files and environment are unchanged is not run again. `make site`,
# `make test` and the docs-as-tests never use it: they run every example.
# The Python and npm installs of a fresh clone run side by side (-j2).
EXEC_CACHE := .cache/exec
serve:
	@$(MAKE) --no-print-directory -j2 $(VENV)/.docs-installed $(PYODIDE)
	QUEUE_CORE_EXEC_CACHE=$(EXEC_CACHE) SITE_URL=http://$(HOST):$(PORT)/ \
		$(BIN)/python -m mkdocs build --strict --site-dir site
	@echo "Serving the site at http://$(HOST):$(PORT)/ (Ctrl-C to stop)"
	$(BIN)/python -m http.server $(PORT) --bind $(HOST) --directory site

# For authors: rebuilds and reloads the page on every save (of docs/, snippets/,
# queue_core/, docs_support/, proof/ or overrides/), running only the examples
# whose output may have changed.
live:
	@$(MAKE) --no-print-directory -j2 $(VENV)/.docs-installed $(PYODIDE)
	QUEUE_CORE_EXEC_CACHE=$(EXEC_CACHE) SITE_URL=http://$(HOST):$(PORT)/ \
		$(BIN)/python -m mkdocs serve --strict --dev-addr $(HOST):$(PORT) \
		--watch snippets --watch queue_core --watch docs_support --watch proof --watch overrides

# Docs-as-tests in an environment of their own holding only the documentation
# and docs-test requirements (no browser, no PostgreSQL, no test-only package
# of the full suite): what a reader needs to run the site's examples.
DOCS_VENV := .venv-docs
$(DOCS_VENV)/.installed: requirements-docs.txt requirements-docs-test.txt constraints.txt pyproject.toml
	$(PYTHON) -m venv $(DOCS_VENV)
	$(DOCS_VENV)/bin/python -m pip install --quiet --disable-pip-version-check -c constraints.txt \
		-r requirements-docs.txt -r requirements-docs-test.txt
	$(DOCS_VENV)/bin/python -m pip install --quiet --disable-pip-version-check -c constraints.txt -e .
	@touch $@

docs-test: $(DOCS_VENV)/.installed
	$(DOCS_VENV)/bin/python -m pytest -q -p no:cacheprovider docs tests/test_snippets.py \
		tests/test_docs_console.py tests/test_page_outputs.py tests/test_readme.py

# The benchmark (not part of `make test`): its own venv with the peers and matplotlib.
BENCH_VENV := .venv-bench
$(BENCH_VENV)/.installed: requirements-bench.txt pyproject.toml
	$(PYTHON) -m venv $(BENCH_VENV)
	$(BENCH_VENV)/bin/python -m pip install --quiet --disable-pip-version-check -r requirements-bench.txt
	$(BENCH_VENV)/bin/python -m pip install --quiet --disable-pip-version-check -e ".[postgres]"
	@touch $@

bench: $(BENCH_VENV)/.installed
	$(BENCH_VENV)/bin/python scripts/bench.py --out docs/assets/bench

clean:
	rm -rf $(VENV) $(BENCH_VENV) $(DOCS_VENV) tests/browser/node_modules site_runtime/node_modules site build *.egg-info .pytest_cache .hypothesis test-artifacts .cache
