#!/usr/bin/env bash
# The speech experiment: every sampler with seeds 1..N (default 3), one run after another, on the
# generated dataset (created by the first run if missing), then the summary table and plot.
#   examples/speech_commands/run_experiment.sh [num_seeds]
# Environment: PYTHON (default .venv/bin/python); CONFIG, the flagfile (default
# configs/speech_commands.flags); SAMPLERS (default the two uniform baselines and four PDS samplers); RUNS_DIR
# (default runs/speech_commands), which receives <sampler><TAG>_seed<seed>/ per run; FLAGS, more flags
# for every run (e.g. FLAGS="--space=gradient --radius=auto" TAG=_gradient).
# Runs that already have results.json are skipped, so an interrupted experiment resumes.
set -euo pipefail
# From the repository root, where `python -m examples...` finds the examples and the package.
cd "$(dirname "$0")/../.."
SEEDS=${1:-3}
PYTHON=${PYTHON:-.venv/bin/python}
CONFIG=${CONFIG:-configs/speech_commands.flags}
SAMPLERS=${SAMPLERS:-uniform epoch_shuffle vanilla_pds easy_pds dense_pds anneal_pds}
RUNS_DIR=${RUNS_DIR:-runs/speech_commands}
for seed in $(seq 1 "$SEEDS"); do
  for sampler in $SAMPLERS; do
    workdir=$RUNS_DIR/${sampler}${TAG:-}_seed${seed}
    if [ -f "$workdir/results.json" ]; then
      continue
    fi
    echo "$(date +%T) $sampler seed $seed"
    mkdir -p "$workdir"
    "$PYTHON" -m examples.speech_commands.main --flagfile="$CONFIG" \
        --sampler="$sampler" --seed="$seed" --workdir="$workdir" --verbose=2 ${FLAGS:-} > "$workdir/train.log" 2>&1
    tail -n 1 "$workdir/train.log"
  done
done
"$PYTHON" -m examples.speech_commands.summarize --runs_dir="$RUNS_DIR"
