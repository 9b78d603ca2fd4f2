# Two entry points: `make drill` (set up, then run the local recovery drill) and `make test`.
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: setup drill test lint

setup: $(STAMP)

# torch is pinned to the CPU build so the local tier never pulls a multi-GB CUDA wheel;
# the training image brings its own CUDA build.
$(STAMP): pyproject.toml training-image/pyproject.toml
	command -v promtool >/dev/null || { apt-get update -qq && apt-get install -y -qq --no-install-recommends prometheus >/dev/null; }
	command -v amtool >/dev/null || { apt-get update -qq && apt-get install -y -qq --no-install-recommends prometheus-alertmanager >/dev/null; }
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e './training-image[gcs,local]' -e '.[dev]'
	touch $(STAMP)

drill: $(STAMP)
	$(VENV)/bin/spotctl drill

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

test: $(STAMP) lint
	$(VENV)/bin/pytest -q
