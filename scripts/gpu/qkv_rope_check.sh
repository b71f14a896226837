#!/usr/bin/env bash
# H200, issue 4: the weaver 64 round is ~3.02x the AR step (h200_v24/v25). Its verify ropes the 65 nodes' q/k
#   and writes K/V in a launch of its own after every qkv GEMM; qkv_rope_kv does that inside the GEMM's
#   programs (one head per column tile): 30 launches fewer a verify. One call:
#   1. compiled tests: qkv_rope_kv bit-equal to the two launches at SmolLM2 / Qwen3 head shapes up to 65
#      nodes; the fast verify against the reference;
#   2. rounds_check.py --quick (chain / ddtree / weaver one-graph rounds equal the ar tokens);
#   3. round_profile.py ar + chain 16 + weaver 64 with WEAVER_QKV_ROPE=0 (before) and 1 (after).
#   device run:  bash scripts/gpu/qkv_rope_check.sh      (results in $OUT)
OUT=${OUT:-/tmp/qkv_rope_out}
source "$(dirname "$0")/common.sh"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader | tee "$OUT/tests_gpu.txt"
(timeout "${PC_TEST_S:-150}" python3 -m pytest --triton-full -q -p no:cacheprovider -rfs \
  tests/kernels/test_qkv_rope.py tests/models/test_fast_verify.py 2>&1 | tail -8) | tee -a "$OUT/tests_gpu.txt"
timeout "${PC_CHECK_S:-100}" python3 scripts/gpu/rounds_check.py --quick 2>&1 | filter | tee "$OUT/rounds_check.txt" | tail -4
profile before WEAVER_QKV_ROPE=0
profile after WEAVER_QKV_ROPE=1
