#!/usr/bin/env bash
# Run the notebook series 01 -> 06 (the tiny preset unless REASONKIT_PRESET says another);
# executed notebooks and plots land in runs/<run>/ (runs/demo/ for tiny).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export REASONKIT_PRESET="${REASONKIT_PRESET:-tiny}"
# A run is one preset's: the tiny quick start is runs/demo, another preset runs/demo-<preset>
# (a run made under another model is refused, not reused). REASONKIT_RUN chooses another.
if [ "$REASONKIT_PRESET" = tiny ]; then default_run=demo; else default_run="demo-$REASONKIT_PRESET"; fi
export REASONKIT_RUN="${REASONKIT_RUN:-$default_run}"
export REASONKIT_RUNS="${REASONKIT_RUNS:-$PWD/runs}" REASONKIT_CACHE="$PWD/.cache/reasonkit"
out="$REASONKIT_RUNS/$REASONKIT_RUN/notebooks"
mkdir -p "$out"
for nb in notebooks/0*.ipynb; do
  echo "== $nb"
  .venv/bin/jupyter nbconvert --to notebook --execute --ExecutePreprocessor.timeout="${REASONKIT_CELL_TIMEOUT:-7200}" \
    --output-dir "$out" "$nb"
done
echo "Executed notebooks: $out"
echo "Per-stage table:    $REASONKIT_RUNS/$REASONKIT_RUN/eval/stage_table.md"
