# brrr: two commands do all set-up on a fresh machine.
#   make book   create .venv, install, execute every notebook, build the HTML book in _build/html
#   make test   the same set-up, then the test suite (within ten minutes on two cores)
#   make test-e2e   the end-to-end stage: the book built and read in Chromium, whole gradebook runs
#   make test-stacks   on the GPU nodes' and Colab's torch and Triton (.ci/stacks.toml), what depends on them
# GPU nodes without internet: `make wheelhouse` where there is internet, carry the
# folder across, then `make gpu-check` on the node (see README).

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
INSTALLED := $(VENV)/.installed

# Keep every cache inside the checkout; notebooks and the book inherit these.
export BRRR_CACHE_DIR := $(CURDIR)/.cache/brrr
export TORCHINDUCTOR_CACHE_DIR := $(CURDIR)/.cache/inductor
export PYTHONUNBUFFERED := 1
# A missed timing target or measured claim fails what make runs (the book, the tests, gpu-check); in a
# reader's own Jupyter or Colab session it is printed with how to measure again (brrr/targets.py).
export BRRR_STRICT := 1
# glibc hands large buffers back to the OS on free; every new tensor then pays page
# faults. These keep freed memory in the process, as a caching allocator does on GPU.
# `import brrr` applies the same settings itself (brrr/allocator.py); these cover
# processes that never import it.
export MALLOC_MMAP_MAX_ := 0
export MALLOC_TRIM_THRESHOLD_ := 100000000000

BOOK_FLAGS := -W -n --keep-going
# First on JUPYTER_PATH, book/brrr_book/warm/jupyter_path's kernelspec python3 forks each notebook's kernel from one
# process that has imported torch and the rest of every page's set-up, once (book/brrr_book/warm/); the tests' book
# builds take the same path from the same function.
WARM_JUPYTER_PATH = $(shell $(PY) -c 'from brrr_book.warm import jupyter_path; print(jupyter_path())')

.PHONY: book test test-e2e test-stacks labs mutants gpu-check wheelhouse clean install

install: $(INSTALLED)

# torch comes first, by pip: pip takes the CPU build that lies on this kind of machine's disk, and with
# torch==2.13.0 installed nothing below can pull a CUDA build. The rest goes in with uv, which resolved and
# installed requirements.txt in 18 s against pip's 55 s on the 2-core CI machine: the suite's budget is
# counted from a fresh clone. --no-cache keeps uv's 1.5 GB cache off the disk;
# --compile-bytecode writes the .pyc files pip would have, which graded notebooks (no bytecode written)
# would otherwise compile again in every process.
UV_VERSION := 0.13.9
UV_INSTALL := $(PY) -m uv pip install --quiet --no-cache --compile-bytecode --python $(PY)

$(INSTALLED): requirements.txt pyproject.toml book/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet torch==2.13.0 uv==$(UV_VERSION)
	$(UV_INSTALL) -r requirements.txt
	$(UV_INSTALL) --no-deps -e . -e book
	touch $@

# The roofs every page divides by, measured afresh on a quiet machine before any notebook runs (a cached
# roof measured under other load on another day would leave measurements above it).
CEILINGS := $(PY) -m brrr.ceilings --refresh

book: $(INSTALLED)
	rm -rf _build
	$(CEILINGS) && $(CEILINGS) --threads 1
	JUPYTER_PATH="$(WARM_JUPYTER_PATH)" $(VENV)/bin/jupyter-book build . $(BOOK_FLAGS)
	@echo "Book built: open _build/html/index.html"

# Inductor compiles in the process that asks: a pool of compile workers costs each compiling process
# (every notebook, every grader) 3-4 CPU-s of start-up on the 2-core CI machine and runs no compile
# sooner there. It does not change what a compiled kernel measures.
# `make test` leaves out the end-to-end stage (tests marked e2e; tests/conftest.py marks every test that
# reads the built book): the two together used 1,387 CPU-seconds in a fresh clone, 810 s on the 2-core CI
# machine, against a budget of 600 s. CI runs both (.ci/run); a plain `pytest` runs both.
test test-e2e test-stacks: export TORCHINDUCTOR_COMPILE_THREADS := 1
test: $(INSTALLED)
	$(PY) -m pytest -n 2 --dist loadfile -m "not e2e"

test-e2e: $(INSTALLED)
	$(PY) -m pytest -n 2 --dist loadfile -m e2e

# Every other stack of .ci/stacks.toml (a GPU node's torch and Triton, Colab's): in a venv of its own each,
# what depends on their versions (.ci/test-stacks says what). CI runs it after the two stages.
test-stacks:
	$(PYTHON) .ci/test-stacks $(STACKS)

labs: $(INSTALLED)
	$(PY) -m brrr.labs

# Plant each bug listed in tests/mutants/mutants.toml in a scratch copy, one at a time, and run the tests
# it names: a table of caught and survived, exit status 1 if any survived. Not part of `make test` (5-10
# ten minutes on two cores); tests/mutants/test_mutants.py checks the list itself there.
mutants: export TORCHINDUCTOR_COMPILE_THREADS := 1
mutants: $(INSTALLED)
	$(PY) tests/mutants/run.py $(MUTANTS_FLAGS)

# ---------------------------------------------------------------- GPU nodes without internet
# The node has python3 with torch, triton and most of the rest (.ci/gpu-node-packages.txt): the
# wheelhouse carries only what it lacks. pip resolves requirements.txt (less torch, triton and the
# book's stack: the book is not built on the node) for the node's Python, `wheels split` keeps what the
# node list lacks, and only that is downloaded. The last line says what a GPU call sends: tree + wheels.
WHEEL_PYTHON ?= 3.12
WHEEL_PLATFORMS := manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 \
	manylinux2014_x86_64 manylinux1_x86_64
WHEEL_TARGET := --only-binary=:all: --python-version $(WHEEL_PYTHON) --implementation cp \
	$(addprefix --platform ,$(WHEEL_PLATFORMS))
GPU_VENV := .venv-gpu

wheelhouse: $(INSTALLED)
	rm -rf wheelhouse && mkdir -p wheelhouse
	grep -vE '^(torch|triton)([=<> ]|$$)|book-only' requirements.txt > wheelhouse/requirements-all.txt
	echo "setuptools" >> wheelhouse/requirements-all.txt
	$(PY) -m pip install --dry-run --ignore-installed --quiet --report wheelhouse/resolved.json \
		$(WHEEL_TARGET) --target wheelhouse/dry-run -r wheelhouse/requirements-all.txt
	$(PY) -m brrr_book.gpucheck wheels split wheelhouse/resolved.json
	$(PY) -m pip download --quiet --no-deps --dest wheelhouse $(WHEEL_TARGET) \
		-r wheelhouse/requirements-node.txt
	$(PY) -m brrr_book.gpucheck size

# PART=1|2 runs one part of the check (one command, within 5 minutes), OUT=DIR the folder its record
# goes to, ARCHIVE=FILE the one archive it hands back (DIR.tgz); without PART both run, and are merged.
# The parts: book/brrr_book/gpucheck/plan.py.
gpu-check:
	bash .ci/gpu-check $(if $(PART),--part $(PART)) $(if $(OUT),--out $(OUT)) \
		$(if $(ARCHIVE),--archive $(ARCHIVE))

clean:
	rm -rf _build .cache .pytest_cache $(GPU_VENV) .venv-gpu-node .venv-colab
