#!/usr/bin/env bash
# Issue 19, one device call (~600 s of command): the GPU work still owed after session 52, most needed first, each
# step bounded so a cut call still returns what ran (every file is written under $OUT as it goes).
#   on an H200:
#     1. profile.txt: the 27B rounds (ar / chain:16 / weaver:64) at the default capacity, the H200 figures issue 19
#        asks for, then the rounds again with a 32,768-token draft map (session 41's draft head);
#     2. gemv_m1.txt: weaver's GEMV against cuBLAS at M = 1 on the 27B shapes (today's rule was chosen on an H100);
#        where cuBLAS wins, the AR step's rule needs an H200 entry;
#     3. gemv_swiglu.txt: gate_up with SwiGLU in the GEMV's epilogue against cuBLAS + torch's SwiGLU;
#   device run:  source scripts/gpu/setup.sh; bash scripts/gpu/owed_27b.sh     (carry .whl)
#   then, on the warm H200: source scripts/gpu/setup.sh; bash scripts/gpu/gemv_tiles_ab.sh (the down projection's
#   gemv_tiles against cuBLAS in the AR step, chosen on an H100 in session 52), and `weaver bench scale` in the
#   parts of benchmarks/results/scale/h100_session52/COMMAND.txt (merged with `bench scale --merge`), and
#   scripts/gpu/blas_ab.sh (cuBLASLt against cuBLAS in the rounds; on an H100 too).
OUT=${OUT:-/tmp/owed_out}
source scripts/gpu/common.sh
if ! nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  echo "not an H200: these figures are the H200's"
  exit 0
fi
profile="scripts/gpu/round_profile.py --model qwen3.6-27b-shape --drafter published --adapter paper --reps 20 --top 14"
echo "specs: ar chain:16 weaver:64 --draft-vocab first:32768" > "$OUT/profile.txt"
timeout "${OWED_PROFILE:-320}" python3 $profile --specs ar chain:16 weaver:64 --draft-vocab first:32768 2>&1 | filter \
  >> "$OUT/profile.txt"
grep "ar step\|^verify\|^ROUND\|^draft\|^commit\|^build" "$OUT/profile.txt"
timeout "${OWED_GEMV:-130}" python3 scripts/gpu/gemv_wide_ab.py > "$OUT/gemv_m1.txt" 2>&1
timeout "${OWED_SWIGLU:-50}" python3 scripts/gpu/gemv_wide_ab.py --swiglu > "$OUT/gemv_swiglu.txt" 2>&1
grep -h "best/cuBLAS\|SwiGLU" "$OUT"/gemv_*.txt
