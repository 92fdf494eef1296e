#!/usr/bin/env bash
# bench_student_grid's `run` on a lent GPU (the `device` tool's `run`, carry [".grid"]): .grid/pack
# from `bench_student_grid pack --dtype float16 --out .grid/pack` (float16: a float32 MiniLM with
# the rest does not fit the 64 MiB carry) and .grid/whl, the cp312 wheels of what the run imports
# that the machine's image lacks (pydantic, datasets and their own; fetched as bench/gpu_lease.sh's .whl).
# Results come back as $OUT/grid.tgz (grid/: one JSON line and one .npz of per-item scores per
# model; a call returns only a few files, so they travel as one) and $OUT/grid.log;
# `tar xzf grid.tgz` here, then `bench_student_grid report --runs grid` makes the tables.
#   GRID_S=560 bash bench/gpu_grid.sh [run options]
set -u
source bench/gpu_env.sh .grid/whl
export TOKENIZERS_PARALLELISM=true  # safe: the trainer forks no data workers (num_workers 0)
GRID_S="${GRID_S:-560}"
timeout "$GRID_S" python3 -m bench.bench_student_grid run --pack .grid/pack --out "$OUT/grid" \
  --budget-s $((GRID_S - 30)) "$@" 2>&1 \
  | grep --line-buffered -v -e Warning -e "Loading weights" -e "Writing model" -e "Generating train" \
  | tee "$OUT/grid.log" | grep -e '^{' -e '^budget'
tar czf "$OUT/grid.tgz" -C "$OUT" grid && rm -rf "$OUT/grid"
