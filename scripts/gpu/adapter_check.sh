#!/usr/bin/env bash
# H200, issue 4: the fused Weaver step kernels (node attention, scoring tail; WEAVER_FUSED_ADAPTER=1), not yet
# run on a GPU when written. One call, no GGUF:
#   1. their compiled tests at full size against the references (and the top-k kernel's);
#   2. captured one-graph rounds with them equal the ar tokens (rounds_check.py --quick, fp32 tiny llama);
#   3. round_profile.py ar + weaver budget 64, without and with them (same run: the A/B of the build stage).
#   device run:  bash scripts/gpu/adapter_check.sh      (results in $OUT)
set -uo pipefail
OUT=${OUT:-/tmp/adapter_out}
mkdir -p "$OUT"
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
filter() { grep -v "Loading weights\|TensorFloat32\|warnings.warn\|USDT\|_warn_once\|Profiler clears\|Dynamo detected\|originates\|weaver_builder_device.py\|for _ in range\|warn_once\|^$"; }
(cd tests/ops && WEAVER_TRITON_FULL=1 timeout "${AC_TEST_S:-120}" python3 -m pytest -q -p no:cacheprovider \
  test_triton_pool_top.py test_triton_node_attention.py test_triton_topk.py 2>&1 | tail -4) | tee "$OUT/tests_gpu.txt"
WEAVER_FUSED_ADAPTER=1 timeout "${AC_CHECK_S:-150}" python3 scripts/gpu/rounds_check.py --quick 2>&1 | filter \
  | tee "$OUT/rounds_check.txt"
for fused in 0 1; do
  WEAVER_FUSED_ADAPTER=$fused timeout "${AC_PROFILE_S:-150}" python3 scripts/gpu/round_profile.py \
    --specs ar weaver:64 2>&1 | filter | tee "$OUT/profile_fused$fused.txt"
done
