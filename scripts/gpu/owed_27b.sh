#!/usr/bin/env bash
# Issue 19, one device call (~600 s of command): the GPU work still owed after session 50, most needed first, each
# step bounded so a cut call still returns what ran (every file is written under $OUT as it goes).
#   on an H200:
#     1. profile.txt: the 27B rounds (ar / chain:16 / weaver:64) at the default capacity, the H200 figures issue 19
#        asks for, then the rounds again with a 32,768-token draft map (session 41's draft head);
#     2. gemv_m1.txt: weaver's GEMV against cuBLAS at M = 1 on the 27B shapes (today's rule was chosen on an H100);
#        where cuBLAS wins, the AR step's rule needs an H200 entry;
#     3. skinny17.txt: the swapped-operand skinny GEMM (wgmma on weight-row tiles) against cuBLAS at 17 rows;
#     4. gemv_swiglu.txt: gate_up with SwiGLU in the GEMV's epilogue against cuBLAS + torch's SwiGLU;
#   on an H100 (the one-row and capacity questions were answered there in sessions 45 and 50):
#     skinny17.txt, skinny65.txt, skinny16.txt: the skinny GEMM against cuBLAS and cuBLASLt at a chain verify's 17
#     rows, a weaver-64 verify's 65 and the draft's 16 (its fc and LM head): session 50's sweep of the row-tiled
#     kernel (mma.sync, no cp.async pipeline) lost 1.20-1.41x at 17 rows.
#   device run:  source scripts/gpu/setup.sh; bash scripts/gpu/owed_27b.sh     (carry .whl)
OUT=${OUT:-/tmp/owed_out}
source scripts/gpu/common.sh
skinny=scripts/gpu/skinny_gemm_ab.py
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  profile="scripts/gpu/round_profile.py --model qwen3.6-27b-shape --drafter published --adapter paper --reps 20 --top 14"
  echo "specs: ar chain:16 weaver:64 --draft-vocab first:32768" > "$OUT/profile.txt"
  timeout "${OWED_PROFILE:-320}" python3 $profile --specs ar chain:16 weaver:64 --draft-vocab first:32768 2>&1 | filter \
    >> "$OUT/profile.txt"
  grep "ar step\|^verify\|^ROUND\|^draft\|^commit\|^build" "$OUT/profile.txt"
  timeout "${OWED_GEMV:-120}" python3 scripts/gpu/gemv_wide_ab.py > "$OUT/gemv_m1.txt" 2>&1
  timeout "${OWED_SKINNY:-100}" python3 $skinny --rows 17 --shapes mlp.gate_up mlp.down > "$OUT/skinny17.txt" 2>&1
  timeout "${OWED_SWIGLU:-40}" python3 scripts/gpu/gemv_wide_ab.py --swiglu > "$OUT/gemv_swiglu.txt" 2>&1
else
  timeout "${OWED_SKINNY:-260}" python3 $skinny --rows 17 > "$OUT/skinny17.txt" 2>&1
  timeout 150 python3 $skinny --rows 65 --shapes mlp.gate_up mlp.down gdn.in_proj_qkvz > "$OUT/skinny65.txt" 2>&1
  timeout 150 python3 $skinny --rows 16 --shapes drafter.fc lm_head mlp.gate_up > "$OUT/skinny16.txt" 2>&1
fi
grep -h "best/cuBLAS" "$OUT"/*.txt
