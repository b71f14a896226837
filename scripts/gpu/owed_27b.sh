#!/usr/bin/env bash
# Issue 19, one device call (~600 s of command): the GPU work still owed after session 50, most needed first, each
# step bounded so a cut call still returns what ran (every file is written under $OUT as it goes).
#   on an H200:
#     1. gemv_m1.txt: weaver's GEMV against cuBLAS at M = 1 on the 27B shapes (today's rule was chosen on an H100),
#        and gemv_swiglu.txt, the same for gate_up with SwiGLU: where cuBLAS wins there, the AR step's rule needs an
#        H200 entry;
#     2. profile.txt: the 27B rounds (ar / chain:16 / weaver:64) at the default capacity, the H200 figures issue 19
#        asks for, then the rounds again with a 32,768-token draft map (session 41's draft head);
#   on an H100 (the one-row and capacity questions were answered there in sessions 45 and 50):
#     rows17.txt / rows17_no_pdl.txt: the verify's GEMMs at 17 rows, the row-tiled Triton kernel with long K tiles
#     (session 50's first grid lost 1.20-1.41x to cuBLAS) with and without PDL's weight-row prefetch.
#   device run:  source scripts/gpu/setup.sh; bash scripts/gpu/owed_27b.sh     (carry .whl)
OUT=${OUT:-/tmp/owed_out}
source scripts/gpu/common.sh
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  timeout "${OWED_GEMV:-130}" python3 scripts/gpu/gemv_wide_ab.py > "$OUT/gemv_m1.txt" 2>&1
  timeout "${OWED_SWIGLU:-50}" python3 scripts/gpu/gemv_wide_ab.py --swiglu > "$OUT/gemv_swiglu.txt" 2>&1
  profile="scripts/gpu/round_profile.py --model qwen3.6-27b-shape --drafter published --adapter paper --reps 20 --top 14"
  echo "specs: ar chain:16 weaver:64 --draft-vocab first:32768" > "$OUT/profile.txt"
  timeout "${OWED_PROFILE:-330}" python3 $profile --specs ar chain:16 weaver:64 --draft-vocab first:32768 2>&1 | filter \
    >> "$OUT/profile.txt"
  grep "ar step\|^verify\|^ROUND\|^draft\|^commit\|^build" "$OUT/profile.txt"
else
  rows="scripts/gpu/gemv_wide_ab.py --rows 17 --shapes mlp.gate_up mlp.down"
  timeout "${OWED_ROWS:-250}" python3 $rows > "$OUT/rows17.txt" 2>&1
  timeout "${OWED_ROWS:-250}" python3 $rows --no-pdl > "$OUT/rows17_no_pdl.txt" 2>&1
  grep "best/cuBLAS" "$OUT"/rows17*.txt
fi
