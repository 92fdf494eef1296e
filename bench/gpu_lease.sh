#!/usr/bin/env bash
# The GPU checks of issue 33 in one command on a lent machine (the `device` tool's `run`), with
# .whl (ctxsim's dependencies missing from the machine's image, cp312 wheels) and .gpu (the
# packaged models' config.json + SmolLM2's tokenizer, 3,000 book paragraphs split into sentences)
# carried. Results land in $OUT: bench/results/gpu.{md,json}, the CUDA test log.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl || exit 1
mkdir -p /tmp/pkg/ctxsim
for d in flows tasks models store readers scores product; do ln -sfn "$PWD/$d" "/tmp/pkg/ctxsim/$d"; done
export PYTHONPATH="/tmp/pkg:$PWD:/tmp/site" PYTHONUNBUFFERED=1 DO_NOT_TRACK=1 PREFECT_SERVER_ANALYTICS_ENABLED=false
export PREFECT_HOME=/tmp/prefect HF_HUB_OFFLINE=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/nvidia_smi.txt"
timeout "${BENCH_S:-330}" python3 -m bench.bench_gpu --arch-dir .gpu/arch --sentences .gpu/sentences.jsonl "$@" 2>&1 \
  | grep -v -e Warning -e "forward_call(" -e "func(self" | tee "$OUT/bench_gpu.log"
cp bench/results/gpu.md bench/results/gpu.json "$OUT/" 2>/dev/null
# the suite's CUDA paths: models (the score engine's OOM handling), ops (one worker per GPU)
[ "${TEST_S:-100}" = 0 ] || timeout "${TEST_S:-100}" python3 -m pytest -q -p no:cacheprovider -n 8 tests/models tests/flows/test_ops_gpus.py \
  >"$OUT/pytest_cuda.log" 2>&1; tail -5 "$OUT/pytest_cuda.log"
