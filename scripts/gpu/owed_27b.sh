#!/usr/bin/env bash
# Issue 19, one device call (~600 s of command): the GPU work owed since session 45, most needed first, each step
# bounded so a cut call still returns what ran (every file is written under $OUT as it goes).
#   1. tests.txt: the compiled kernel tests (scripts/gpu/kernel_tests.sh; session 49 ran them on session 48's
#      candidate tree, where the only failures were its conv epilogue's and a tiny hybrid model's decode test,
#      since mended: it prefilled through fla's TF32 chunk kernel);
#   2. gemv_m1.txt: weaver's GEMV against cuBLAS at M = 1 on the 27B shapes (today's rule was chosen on an H100),
#      and gemv_swiglu.txt, the same for gate_up with SwiGLU: a win there is the next AR-step change;
#   3. on an H200: profile.txt, the 27B rounds (ar / chain:16 / weaver:64) at the default capacity, the H200
#      figures issue 19 asks for, then the rounds again with a 32,768-token draft map (session 41's draft head);
#      on an H100: profile.txt at --min-capacity 32768 (ar / chain:16): session 45's slot ops and the drafter's
#      split attention at a server's capacity, never profiled at 27B.
#   device run:  source scripts/gpu/setup.sh; bash scripts/gpu/owed_27b.sh     (carry .whl; OWED_TESTS=0: no step 1)
OUT=${OUT:-/tmp/owed_out}
source scripts/gpu/common.sh
[ "${OWED_TESTS:-150}" = 0 ] || bash scripts/gpu/kernel_tests.sh "${OWED_TESTS:-150}"
timeout "${OWED_GEMV:-130}" python3 scripts/gpu/gemv_wide_ab.py > "$OUT/gemv_m1.txt" 2>&1
timeout "${OWED_SWIGLU:-50}" python3 scripts/gpu/gemv_wide_ab.py --swiglu > "$OUT/gemv_swiglu.txt" 2>&1
profile="scripts/gpu/round_profile.py --model qwen3.6-27b-shape --drafter published --adapter paper --reps 20 --top 14"
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  echo "specs: ar chain:16 weaver:64 --draft-vocab first:32768" > "$OUT/profile.txt"
  timeout "${OWED_PROFILE:-330}" python3 $profile --specs ar chain:16 weaver:64 --draft-vocab first:32768 2>&1 | filter \
    >> "$OUT/profile.txt"
else
  echo "specs: ar chain:16 --min-capacity 32768" > "$OUT/profile.txt"
  timeout "${OWED_PROFILE:-220}" python3 $profile --specs ar chain:16 --min-capacity 32768 2>&1 | filter \
    >> "$OUT/profile.txt"
fi
grep "ar step\|^verify\|^ROUND\|^draft\|^commit\|^build" "$OUT/profile.txt"
