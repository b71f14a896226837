# Sourced by the device scripts (after setting OUT's default): strict mode, $OUT created, PYTHONPATH on src/,
# and `filter`, which drops the warning noise of torch.compile / the profiler from the logs kept under $OUT.
set -uo pipefail
mkdir -p "$OUT"
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
filter() { grep -v "Loading weights\|TensorFloat32\|warnings.warn\|USDT\|_warn_once\|Profiler clears\|Dynamo detected\|originates\|weaver_builder_device.py\|for _ in range\|warn_once\|rounds = \|Online softmax\|split the reduction\|important use case\|softmax\.$\|^$"; }
