# Two entry points, both idempotent: `make demo` and `make test`. Each creates .venv if missing,
# installs the pinned requirements (again only when requirements*.txt or pyproject.toml changed;
# requirements-verl.txt without dependencies, see the file), then runs.
PY ?= python3
VENV := .venv
STAMP := $(VENV)/.installed

$(STAMP): requirements.txt requirements-verl.txt pyproject.toml
	test -x $(VENV)/bin/python || $(PY) -m venv $(VENV)
	$(VENV)/bin/python -m pip install -q --upgrade pip
	$(VENV)/bin/python -m pip install -q -r requirements.txt
	$(VENV)/bin/python -m pip install -q --no-deps -r requirements-verl.txt
	$(VENV)/bin/python -m pip install -q --no-deps -e .
	touch $(STAMP)

.PHONY: install demo test test-full notebooks chromium book
install: $(STAMP)

# the browser test (tests/notebooks/test_browser.py) drives Debian's chromium; install it when missing (CI runs as root)
chromium:
	@command -v chromium >/dev/null 2>&1 || (apt-get update && apt-get install -y chromium)

demo: $(STAMP)
	$(VENV)/bin/grpo-kit demo

# unit tests, and every notebook in smoke mode in the browser test (JupyterLab in chromium: run all cells,
# check what the notebook recorded, move the sliders, press Stop); the full-size runs and the headless
# (papermill) smoke runs of the same cells are deselected (pyproject.toml; run those with `pytest -m headless`).
# JOBS pytest workers (pytest-xdist): two notebooks, or a notebook and unit tests, at once
JOBS ?= 2
test: $(STAMP) chromium
	$(VENV)/bin/python -m pytest -ra -n $(JOBS) --dist worksteal

# every notebook at its default (full) parameters, asserting every claim it teaches, and the failure
# lab's full runs; one test at a time (two full notebooks training on two threads each ran 4-7x slower
# on 2 cores). It ends with a table of each notebook's time against the 60-minute budget.
test-full: $(STAMP)
	$(VENV)/bin/python -m pytest -ra -m full

# the notebooks with their outputs as a static site in build/book/ (open build/book/index.html), from the
# executed copies make test-full keeps in build/executed/; a notebook missing there runs first, at full
# parameters, or in smoke mode with BOOK_SMOKE=1 (its page then says its numbers are not results)
BOOK_SMOKE ?=
book: $(STAMP)
	$(VENV)/bin/python tools/book.py $(if $(filter 1,$(BOOK_SMOKE)),--smoke-missing)

notebooks: $(STAMP)
	$(VENV)/bin/jupyter lab notebooks/
