#!/usr/bin/env bash
# H200, issue 4: the row-GEMM tiles of tuned/h200.json were swept in h200_v4, before the hardware rounding
#   (fewer instructions in every K loop) and PDL. h200_v20: chain round 0.793 ms = 1.34x the 0.590 ms AR step,
#   weaver 64 round 1.792 ms = 3.04x (target 3x). One call:
#   1. compiled fast-decode tests (fp32 against the torch step; bf16 with PDL bit-equal to without);
#   2. verify_sweep.py (PDL on, as the rounds launch) -> $OUT/verify_sweep.json;
#   3. round_profile.py ar + chain 16 + weaver 64 with the packaged table (old), then the new sweep's (new).
#   device run:  bash scripts/gpu/retune_check.sh      (results in $OUT)
OUT=${OUT:-/tmp/retune_out}
source "$(dirname "$0")/common.sh"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader | tee "$OUT/tests_gpu.txt"
(timeout "${RT_TEST_S:-120}" python3 -m pytest --triton-full -q -p no:cacheprovider -rfs \
  tests/models/test_fast_decode.py 2>&1 | tail -4) | tee -a "$OUT/tests_gpu.txt"
timeout "${RT_SWEEP_S:-240}" python3 scripts/gpu/verify_sweep.py --budget-s "${RT_BUDGET_S:-150}" \
  --out "$OUT/verify_sweep.json" 2>&1 | filter > "$OUT/verify_sweep.txt"
tail -25 "$OUT/verify_sweep.txt"
profile old WEAVER_TRITON_TUNING=  # empty: the packaged tuned/h200.json
profile new WEAVER_TRITON_TUNING="$OUT/verify_sweep.json"
