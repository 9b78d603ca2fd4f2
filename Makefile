# Two entry points: `make drill` (set up, then run the local recovery drill) and `make test`.
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
CHECKOV_VENV := .venv-checkov
CHECKOV_STAMP := $(CHECKOV_VENV)/.installed

.PHONY: setup drill test lint

setup: $(STAMP) $(CHECKOV_STAMP) policies/venv

# The policy pack's virtualenv (PulumiPolicy.yaml) is the repository's.
policies/venv:
	ln -s ../$(VENV) $@

# torch is the release pinned in training-image/torch.txt (the image's pin too), in the same pip
# command as everything else so no extra can move it; here the CPU build, so the local tier never
# pulls a multi-GB CUDA wheel.
$(STAMP): pyproject.toml training-image/pyproject.toml training-image/torch.txt
	command -v promtool >/dev/null || { apt-get update -qq && apt-get install -y -qq --no-install-recommends prometheus >/dev/null; }
	command -v amtool >/dev/null || { apt-get update -qq && apt-get install -y -qq --no-install-recommends prometheus-alertmanager >/dev/null; }
	# Headless Chromium renders `spotctl review`'s HTML page in tests/review.
	command -v chromium >/dev/null || { apt-get update -qq && apt-get install -y -qq --no-install-recommends chromium >/dev/null; }
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q --requirement training-image/torch.txt \
		-e './training-image[gcs,local,hf,lightning]' -e '.[dev]'
	touch $(STAMP)

# checkov in its own virtualenv: its pins (boto3) clash with the runtime's; the tests run its binary.
$(CHECKOV_STAMP): policies/checkov/requirements.txt
	test -x $(CHECKOV_VENV)/bin/python || python3 -m venv $(CHECKOV_VENV)
	$(CHECKOV_VENV)/bin/python -m pip install -q --upgrade pip
	$(CHECKOV_VENV)/bin/python -m pip install -q --requirement policies/checkov/requirements.txt
	touch $@

drill: setup
	$(VENV)/bin/spotctl drill

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

# One worker per core, each file's tests in one worker (they share module-scoped fixtures).
test: setup lint
	$(VENV)/bin/pytest -q -n auto --dist loadfile
