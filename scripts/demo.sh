#!/usr/bin/env bash
# Run the notebook series 01 -> 06 on the tiny preset; executed notebooks and plots land in runs/.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export REASONKIT_PRESET="${REASONKIT_PRESET:-tiny}" REASONKIT_RUN="${REASONKIT_RUN:-demo}"
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
