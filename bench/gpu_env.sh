# The lent GPU's environment for bench/gpu_lease.sh and bench/gpu_grid.sh (sourced, in the
# repository root on the device): the carried wheels installed into /tmp/site, the checkout
# importable as `ctxsim`, offline settings, and the card named in $OUT/nvidia_smi.txt.
#   source bench/gpu_env.sh WHEEL_DIR [EXTRA_PYTHONPATH]
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$1"/*.whl || exit 1
mkdir -p /tmp/pkg/ctxsim
for d in flows tasks models store readers scores product; do ln -sfn "$PWD/$d" "/tmp/pkg/ctxsim/$d"; done
export PYTHONPATH="/tmp/pkg:$PWD:/tmp/site${2:+:$2}" PYTHONUNBUFFERED=1 DO_NOT_TRACK=1
export PREFECT_SERVER_ANALYTICS_ENABLED=false PREFECT_HOME=/tmp/prefect HF_HUB_OFFLINE=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/nvidia_smi.txt"
