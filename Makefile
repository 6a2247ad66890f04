# Two commands do all set-up on a fresh machine (Python 3.11, pip):
#   make demo  — create/reuse .venv, install arvis, then decode the same images with plain AR, MC-SJD with Gumbel
#                coupling (lossless: AR's very images, checked) and the fastest method on this machine (ZipAR, lossy),
#                print the side-by-side table and write the images next to each other (outputs/demo/)
#   make test  — create/reuse .venv, install arvis, run the test suite on every core (slow benchmarks excluded)
#   make check — the fast tier of the test suite (a few minutes), for the inner loop
VENV ?= .venv
PYTHON ?= python3
PY := $(VENV)/bin/python
STAMP := $(VENV)/.arvis-installed
# Test workers (pytest-xdist, in the test extra): one per core; `make test PYTEST_WORKERS=0` runs in one process.
# --dist loadgroup keeps the tests that share a module-scoped fixture on one worker (tests/conftest.py).
PYTEST_WORKERS ?= auto
PYTEST_PARALLEL := -n $(PYTEST_WORKERS) --dist loadgroup
# The torch build this project is developed and tested with (a local CUDA build that runs on the CPU).
TORCH_SPEC ?= torch==2.14.1 torchvision==0.29.1

.PHONY: demo test check test-slow lint clean-venv

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet $(TORCH_SPEC)
	$(PY) -m pip install --quiet -e ".[all]"
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/arvis generate --class-ids "red apple,whale" --num-images 2 --rounds 3 --warmup \
		--method "mc-sjd:window=16,coupling=gumbel;zipar:row_lag=2" --output outputs/demo --overwrite

test: $(STAMP)
	$(PY) -m pytest -q $(PYTEST_PARALLEL)

# The fast tier for the inner loop (a few minutes): contracts, units, small exact checks; the statistical proofs,
# trainers, figure scripts, servers and the documentation's commands run in `make test` only.
check: $(STAMP)
	$(PY) -m pytest -q $(PYTEST_PARALLEL) -m "not slow and not full"

test-slow: $(STAMP)
	$(PY) -m pytest -q -m slow

lint: $(STAMP)
	$(PY) -m ruff check arvis tests apps eval

clean-venv:
	rm -rf $(VENV)
