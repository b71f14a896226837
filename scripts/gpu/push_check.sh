#!/usr/bin/env bash
# H200, issue 4: the weaver 64 round is 3.01-3.04x the AR step (h200_v20..v23, target 3x, ~0.03 ms short).
#   The device builder now pushes each adapter step's children inside the scoring tail's second launch
#   (pool_top(..., push=...)) and runs the node inputs inside the pop's launch (frontier_pop(..., inputs=)):
#   ~30 launches less a round. One call:
#   1. compiled tests: the scoring tail (+ push) and the builder's Triton bookkeeping at full size, the fast
#      decode (PDL bit-equality);
#   2. rounds_check.py --quick (chain / ddtree / weaver one-graph rounds equal the ar tokens);
#   3. round_profile.py ar + chain 16 + weaver 64 with both launches of their own (WEAVER_FUSED_PUSH=0
#      WEAVER_FUSED_POP=0, before), the push fused only (push) and both fused (after); PDL on in all.
#   (h200_v24: the first fused pop did its lanes one after another, 9 us a launch; the lanes now go in one
#   2-D block.)
#   device run:  bash scripts/gpu/push_check.sh      (results in $OUT)
OUT=${OUT:-/tmp/push_out}
source "$(dirname "$0")/common.sh"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader | tee "$OUT/tests_gpu.txt"
(timeout "${PC_TEST_S:-150}" python3 -m pytest --triton-full -q -p no:cacheprovider -x -rfs \
  tests/kernels/test_pool_top.py tests/kernels/test_weaver_frontier.py tests/models/test_fast_decode.py \
  2>&1 | tail -5) | tee -a "$OUT/tests_gpu.txt"
timeout "${PC_CHECK_S:-80}" python3 scripts/gpu/rounds_check.py --quick 2>&1 | filter | tee "$OUT/rounds_check.txt" | tail -4
profile before WEAVER_FUSED_PUSH=0 WEAVER_FUSED_POP=0
profile push WEAVER_FUSED_PUSH=1 WEAVER_FUSED_POP=0
profile after WEAVER_FUSED_PUSH=1 WEAVER_FUSED_POP=1
