# Two commands set everything up on a fresh machine with Python >= 3.10:
#   make demo   create .venv, install, run the demo (about a minute)
#   make test   create .venv, install, run the test suite
#
# torch is installed first and pinned (constraints.txt) so that resolving the other
# dependencies can never replace it with a different build.

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
TORCH  ?= torch==2.13.0
STAMP  := $(VENV)/.installed

.PHONY: install demo test bench clean

install: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet "$(TORCH)"
	$(PIP) install --quiet -c constraints.txt -e ".[dev]"
	@touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/most demo --out demo_out

test: $(STAMP)
	$(PY) -m pytest -q -n 2

clean:
	rm -rf $(VENV) demo_out .pytest_cache .hypothesis
