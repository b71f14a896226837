#!/usr/bin/env bash
# Issue 19, one device call (~600 s of command): weaver's skinny GEMM (weaver.kernels.triton.skinny, session 50)
# against cuBLAS for the 27B verify's projections, then in the rounds. Each step bounded; files land under $OUT as
# they are written, so a cut call still returns what ran.
#   1. skinny.txt, skinny_table.json: skinny_gemm_ab.py at 17 and 65 rows over the round's eight shapes, the best
#      tiles written as a tuning table (also kept in /tmp for a later call on the warm machine);
#   2. profile_skinny.txt: the 27B rounds of $SKINNY_SPECS (default chain:16) with that table (round_profile.py
#      --tuning): the projections it timed faster than cuBLAS on the skinny GEMM (the verify's, the draft's MLPs
#      and head; the draft's 15-16 rows take the 17-row entries), 64 greedy tokens against ar;
#   3. profile_base.txt: the same rounds on cuBLAS, the baseline.
#   Steps 2-3 are skipped when the sweep (run in this call) finds no shape 3% faster than cuBLAS.
#   A fresh machine compiles each 27B engine cold (~110-140 s a spec), so one call holds the sweep and one spec both
#   ways; the next call on the warm machine (the table kept in /tmp, no sweep) does SKINNY_SPECS=weaver:64.
#   device run:  source scripts/gpu/setup.sh; bash scripts/gpu/skinny_ab.sh     (carry .whl)
OUT=${OUT:-/tmp/skinny_out}
source scripts/gpu/common.sh
if [ ! -f /tmp/skinny_table.json ]; then
  timeout "${SKINNY_SWEEP:-180}" python3 scripts/gpu/skinny_gemm_ab.py --rows 17 65 --table "$OUT/skinny_table.json" \
    > "$OUT/skinny.txt" 2>&1
  cp "$OUT/skinny_table.json" /tmp/skinny_table.json 2> /dev/null
  grep "best/cuBLAS" "$OUT/skinny.txt"
fi
wins=$(grep -o "best/cuBLAS [0-9.]*" "$OUT/skinny.txt" 2> /dev/null | awk '$2 < 0.97' | wc -l)
if [ -f "$OUT/skinny.txt" ] && [ "$wins" = 0 ]; then  # the sweep ran here and no shape won: the rounds can't
  echo "no shape where the skinny GEMM beats cuBLAS by 3%: rounds not profiled"
  exit 0
fi
profile="scripts/gpu/round_profile.py --model qwen3.6-27b-shape --drafter published --adapter paper --reps 20 --top 10"
specs=${SKINNY_SPECS:-chain:16}
[ -f /tmp/skinny_table.json ] && timeout "${SKINNY_PROFILE:-190}" python3 $profile --specs $specs --equal-tokens 64 \
  --tuning /tmp/skinny_table.json 2>&1 | filter > "$OUT/profile_skinny.txt"
timeout "${SKINNY_PROFILE:-190}" python3 $profile --specs $specs 2>&1 | filter > "$OUT/profile_base.txt"
grep -H "^verify\|^ROUND\|match" "$OUT"/profile_*.txt
