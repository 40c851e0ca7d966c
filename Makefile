# `make test` sets up .venv from nothing and runs lint, types and the tests.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
TORCH  := torch==2.13.0
# Where torch comes from: pip's configured indexes by default (PyPI's Linux wheel is the CUDA
# build); TORCH_INDEX=https://download.pytorch.org/whl/cpu gets the CPU build (README, Install).
TORCH_INDEX ?=

.PHONY: test demo bench bench-scaling gpu-check sanitize install lint typecheck pytest clean

# The editable install also compiles the native engine and the cells' step node (setup.py; both
# optional: without a C compiler the package installs and runs torch's kernels, without the node
# the cells' Python path). Their sources are prerequisites, so an edit rebuilds.
NATIVE := setup.py $(wildcard src/cudnn_rnn/_native/*)

$(VENV)/.installed: pyproject.toml $(NATIVE)
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	# torch is pinned here (a CPU wheel on our machines); the package itself asks for a range.
	$(PIP) install --quiet $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX)) $(TORCH)
	# Built in this environment (not pip's isolated one), so that setup.py sees torch and builds
	# the cells' step node (a torch extension) beside the engine; hence setuptools first.
	$(PIP) install --quiet 'setuptools>=77'
	$(PIP) install --quiet --no-build-isolation -e '.[test]'
	touch $@

install: $(VENV)/.installed

# The package, its tests, and the scripts beside it (the benchmark suite, the GPU check, the demo).
LINTED := src tests benchmarks tools examples

lint: install
	$(VENV)/bin/ruff check $(LINTED)
	$(VENV)/bin/ruff format --check $(LINTED)

typecheck: install
	$(VENV)/bin/mypy

# The tests in one process per core (pytest-xdist), a file's tests together in one of them (a file
# may share a build folder or a fixture's files between its tests): 4:45 instead of 8:15 on two
# cores. The files with the longest tests go first (tests/conftest.py, FIRST), the rest by their
# number of tests. PYTEST_WORKERS=0 runs them in this process (-n 0), e.g. to debug one.
PYTEST_WORKERS ?= auto
pytest: install
	$(PY) -m pytest -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder

test: lint typecheck pytest

# The benchmark suite, benchmarks/suite.py (about 12 to 20 minutes on 2 cores; not part of
# `make test`): writes docs/benchmarks.{md,json,png}; then the variants beside their cuDNN modes
# (issue 47), benchmarks/variants.py: docs/benchmarks-variants.{md,json}. To time a model of your
# own instead: cudnn-rnn bench MODEL.
bench: install
	$(PIP) install --quiet --no-build-isolation -e '.[bench]'
	$(PY) benchmarks/suite.py --out docs
	$(PY) benchmarks/variants.py --out docs

# The thread-scaling run (benchmarks/scaling.py; issue 21, item 7): a subset of the suite's shapes at
# 1, 2, 4, 8 and 16 threads (counts above the machine's cores are left out), against the peers with
# the same threads, training too where the suite trains the shape (ours and torch.nn); writes
# docs/benchmarks-16-cores.{md,json,png}. Options pass through SCALING_ARGS, e.g.
# make bench-scaling SCALING_ARGS="--threads 16 8 --no-training --budget 300"; a run cut short is
# finished later with SCALING_ARGS="--threads 4 2 1 --add" (same machine, shapes and timing).
bench-scaling: install
	$(PIP) install --quiet --no-build-isolation -e '.[bench]'
	$(PY) benchmarks/scaling.py --out docs $(SCALING_ARGS)

# Everything that needs CUDA (the cuda-marked tests, opcheck, torch.compile, a short benchmark
# against torch.nn's cuDNN), written into docs/gpu.md by tools/gpu_check.py; without CUDA it says
# so and changes nothing. On a GPU machine that cannot install the pinned torch (no network) but
# whose own python has a CUDA torch and the package's other dependencies:
# make gpu-check GPU_PYTHON=python3 compiles the engine for that python with setup.py's flags and
# runs the check from the source tree.
GPU_PYTHON ?=
# setup.py's flags, read without building (its COMPILE_FLAGS or LINK_FLAGS)
SETUP_FLAGS = $(GPU_PYTHON) -c "import runpy; \
	print(' '.join(runpy.run_path('setup.py', run_name='flags')['$(1)']))"
ifeq ($(GPU_PYTHON),)
gpu-check: install
	$(PY) tools/gpu_check.py --out docs
else
gpu-check:
	$(GPU_PYTHON) -c "import torch" || { echo "$(GPU_PYTHON) has no torch"; exit 1; }
	$${CC:-cc} $$($(call SETUP_FLAGS,COMPILE_FLAGS)) -shared -fPIC \
		-o src/cudnn_rnn/_engine.so \
		src/cudnn_rnn/_native/engine.c $$($(call SETUP_FLAGS,LINK_FLAGS))
	PYTHONPATH=src$${PYTHONPATH:+:$$PYTHONPATH} $(GPU_PYTHON) tools/gpu_check.py --out docs
endif

# The documentation site (mkdocs.yml: docs/, the docstrings, the command's help) into site/;
# open site/index.html. --strict: a broken link, anchor or reference fails the build.
.PHONY: docs
docs: install
	$(PIP) install --quiet --no-build-isolation -e '.[docs]'
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

# The built site in a headless browser (tools/docs_check.py; not part of `make test`): every
# page renders from file:// at 1280 px without scrolling sideways or a table running off it,
# search finds replace_rnns from file://, every internal link and anchor resolves. Needs
# Chromium: apt-get install -y chromium (or CHROMIUM=/path/to/chrome).
.PHONY: docs-check
docs-check: docs
	$(PY) tools/docs_check.py site

# The native engine built with AddressSanitizer and UBSan, and every native test run under them
# (about two minutes; `make test` runs a quick subset in tests/test_sanitize.py).
sanitize: install
	$(PY) tools/sanitize.py

# examples/demo.py: trains, saves, restores and verifies a small CudnnLSTM model (about two
# minutes on 2 CPU cores); options pass through DEMO_ARGS, e.g. make demo DEMO_ARGS="--steps 100
# --nproc 2" (--nproc N runs it under torchrun).
demo: $(VENV)/.installed
	$(PIP) install --quiet --no-build-isolation -e '.[plot]'
	$(PY) examples/demo.py $(DEMO_ARGS)

clean:
	rm -rf $(VENV) build src/*.egg-info src/cudnn_rnn/*.so .pytest_cache .mypy_cache .ruff_cache
