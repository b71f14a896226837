#!/usr/bin/env bash
# H200, issue 4 (chain round): the verify's fused norm + qkv + RoPE + K/V launch (WEAVER_VERIFY_QKV_ROPE=1,
# weaver.ops.triton.verify_qkv), written and CPU-tested without a GPU. One call, no GGUF:
#   1. its compiled tests at full size against the two launches it replaces, and FastVerifier end to end;
#   2. captured one-graph rounds with it equal the ar tokens (rounds_check.py --quick, fp32 tiny llama);
#   3. round_profile.py ar + chain 16 + weaver 64 without and with it, in one run (the A/B).
#   device run:  bash scripts/gpu/verify_qkv_check.sh      (results in $OUT)
set -uo pipefail
OUT=${OUT:-/tmp/verify_qkv_out}
mkdir -p "$OUT"
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
filter() { grep -v "Loading weights\|TensorFloat32\|warnings.warn\|USDT\|_warn_once\|Profiler clears\|Dynamo detected\|originates\|weaver_builder_device.py\|for _ in range\|warn_once\|rounds = \|^$"; }
(WEAVER_TRITON_FULL=1 timeout "${VQ_TEST_S:-120}" python3 -m pytest -q -p no:cacheprovider \
  tests/ops/test_triton_verify_qkv.py tests/models/test_fast_verify.py 2>&1 | tail -4) | tee "$OUT/tests_gpu.txt"
WEAVER_VERIFY_QKV_ROPE=1 timeout "${VQ_CHECK_S:-120}" python3 scripts/gpu/rounds_check.py --quick 2>&1 | filter \
  | tee "$OUT/rounds_check.txt"
for on in 0 1; do
  WEAVER_VERIFY_QKV_ROPE=$on timeout "${VQ_PROFILE_S:-150}" python3 scripts/gpu/round_profile.py \
    --specs ${VQ_SPECS:-ar chain:16 weaver:64} 2>&1 | filter | tee "$OUT/profile_qkv_rope$on.txt"
done
