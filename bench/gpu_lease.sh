#!/usr/bin/env bash
# The GPU checks (issues 33 and 41) in one command on a lent machine (the `device` tool's `run`),
# with .whl (ctxsim's dependencies missing from the machine's image, cp312 wheels) and .gpu (the
# packaged models' config.json + tokenizers, 4,500 book paragraphs split into sentences) carried.
# Results land in $OUT: the bench's results (md, json), its log, the profile, the CUDA test log.
#   BENCH_S=330 TEST_S=120 bash bench/gpu_lease.sh [bench_gpu options]
set -u
# .whl/extra: blingfire without its 95 MB of tokenizer models (the splitter needs none)
source bench/gpu_env.sh .whl "$PWD/.whl/extra"
export TOKENIZERS_PARALLELISM=false
NAME="${NAME:-gpu}"
[ "${BENCH_S:-330}" = 0 ] || timeout "${BENCH_S:-330}" python3 -m bench.bench_gpu --arch-dir .gpu/arch --sentences .gpu/sentences.jsonl \
  --name "$NAME" --profile-out "$OUT/profile.txt" "$@" 2>&1 \
  | grep -v -e Warning -e "forward_call(" -e "func(self" -e "Loading weights" -e "Writing model" | tee "$OUT/bench_gpu.log"
cp "bench/results/$NAME.md" "bench/results/$NAME.json" "$OUT/" 2>/dev/null
# the suite's CUDA paths: the contextual and training models (device auto is CUDA here: the score
# engine, its OOM handling, the encoders), one worker per GPU, bench_gpu's arithmetic
# SIGINT at the limit: pytest still prints its summary of what ran
[ "${TEST_S:-120}" = 0 ] || timeout -s INT "${TEST_S:-120}" python3 -m pytest -q -p no:cacheprovider -n "${WORKERS:-12}" \
  tests/models/contextual tests/models/training tests/flows/test_ops_gpus.py tests/bench/test_bench_gpu.py \
  >"$OUT/pytest_cuda.log" 2>&1; tail -40 "$OUT/pytest_cuda.log"
