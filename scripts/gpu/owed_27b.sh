#!/usr/bin/env bash
# Issue 19, one device call (~600 s of command): the GPU work owed since session 45, most needed first, each step
# bounded so a cut call still returns what ran (every file is written under $OUT as it goes).
#   1. tests.txt: the compiled kernel tests never finished on a GPU since session 45's tree_attention refactor and
#      session 46's 4-warp GDN decode (sessions 46-47 were cut with one F each, its trace never printed): -v names
#      each test as it ends, so a cut run still says which one failed;
#   2. gemv_m1.txt: weaver's GEMV against cuBLAS at M = 1 on the 27B shapes, the long tiles (today's rule, chosen on
#      an H100) beside the unrolled K loop (session 47, compiled here only), and gemv_swiglu.txt, the same for
#      gate_up with SwiGLU: a win there is the next AR-step change;
#   3. on an H200: profile.txt, the 27B rounds (ar / chain:16 / weaver:64) at the default capacity, the H200
#      figures issue 19 asks for;
#      on an H100: profile.txt at --min-capacity 32768 (ar / chain:16): session 45's slot ops and the drafter's
#      split attention at a server's capacity, never profiled at 27B.
#   device run:  source scripts/gpu/setup.sh; bash scripts/gpu/owed_27b.sh     (carry .whl; OWED_TESTS=0: no step 1)
#   then, within the machine's 30 s warm window: scripts/gpu/ar_step_ab.sh (the model-level A/B of step 2)
set -uo pipefail
OUT=${OUT:-/tmp/owed_out}
mkdir -p "$OUT"
drop='UserWarning\|originates from\|^  File \|^$\|warn_once\|_warn_once\|return _triton'
[ "${OWED_TESTS:-150}" = 0 ] || bash scripts/gpu/kernel_tests.sh "${OWED_TESTS:-150}"
timeout "${OWED_GEMV:-130}" python3 scripts/gpu/gemv_wide_ab.py > "$OUT/gemv_m1.txt" 2>&1
timeout "${OWED_SWIGLU:-50}" python3 scripts/gpu/gemv_wide_ab.py --swiglu > "$OUT/gemv_swiglu.txt" 2>&1
profile="scripts/gpu/round_profile.py --model qwen3.6-27b-shape --drafter published --adapter paper --reps 20 --top 14"
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  echo "specs: ar chain:16 weaver:64" > "$OUT/profile.txt"
  timeout "${OWED_PROFILE:-250}" python3 $profile --specs ar chain:16 weaver:64 2>&1 | grep -v "$drop" >> "$OUT/profile.txt"
else
  echo "specs: ar chain:16 --min-capacity 32768" > "$OUT/profile.txt"
  timeout "${OWED_PROFILE:-220}" python3 $profile --specs ar chain:16 --min-capacity 32768 2>&1 | grep -v "$drop" \
    >> "$OUT/profile.txt"
fi
grep "ar step\|^verify\|^ROUND\|^draft\|^commit\|^build" "$OUT/profile.txt"
