#!/usr/bin/env bash
# The GPU check, on a machine with an NVIDIA GPU and the project's environment (`make setup`
# with a CUDA build of torch): the benchmark on CUDA (pinned-memory staging) and an exact-resume
# run on CUDA (CUDA RNG restored, deterministic kernels). Prints the figures; exits non-zero on
# a mismatch or when no GPU is visible. Extra arguments go to gpu_check.py (e.g. --fast).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-.venv/bin/python}
export CUBLAS_WORKSPACE_CONFIG=:4096:8  # deterministic cuBLAS: set before CUDA starts
exec "$PYTHON" benchmarks/gpu_check.py --device cuda "$@"
