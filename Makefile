# The two commands of README: `make demo` and `make test`. Both create .venv and install on first use.
PYTHON ?= python3.11
VENV ?= .venv
# The torch build to install first. Default: the CPU wheel. A CUDA user picks one, e.g.
#   make test TORCH_SPEC="torch==2.13.0 --index-url https://download.pytorch.org/whl/cu128"
TORCH_SPEC ?= torch==2.13.0
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install test test-min demo lint format clean

install: $(STAMP)

$(STAMP): setup.py
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV) || python3 -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet $(TORCH_SPEC)
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	@touch $(STAMP)

test: $(STAMP)
	$(BIN)/ruff check src tests examples benchmarks
	HF_HUB_OFFLINE=1 $(BIN)/python -m pytest -q tests

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

demo: $(STAMP)
	HF_HUB_OFFLINE=1 $(BIN)/python examples/run_clear.py examples/demo/clear_demo.json

lint: $(STAMP)
	$(BIN)/ruff check src tests examples benchmarks
	$(BIN)/ruff format --check src tests examples benchmarks

format: $(STAMP)
	$(BIN)/ruff check --fix src tests examples benchmarks
	$(BIN)/ruff format src tests examples benchmarks

clean:
	rm -rf $(VENV) $(MIN_VENV) build dist src/*.egg-info outputs
