#!/usr/bin/env bash
# Issue 19, one device call (~400 s of command on a warm inductor cache): the 27B AR step with today's GEMV rule
# against the same step with
#   - the K loop unrolled (round_profile.py --gemv-unrolled: UNROLLED_RULE's configs, the down projection on the
#     GEMV too), and
#   - inductor's own kernels (the add + RMSNorm between the GEMVs, the GDN gates) launched with programmatic
#     dependent launch (--inductor-pdl), so the next GEMV's weight prefetch overlaps them;
# one process each, on one machine. The first two greedy-decode 32 tokens with ar after their profile and print
# them: PDL changes which kernels may overlap, so the tokens must be the rule's.
# Run it after scripts/gpu/owed_27b.sh has shown gemv_wide_ab's numbers (edit UNROLLED_RULE from them first), or as
# the next call while that machine is warm (its inductor cache is).
#   device run:  source scripts/gpu/setup.sh; bash scripts/gpu/gemv_unroll_ab.sh     (carry .whl)
set -uo pipefail
OUT=${OUT:-/tmp/gemv_unroll_out}
mkdir -p "$OUT"
drop='UserWarning\|originates from\|^  File \|^$\|warn_once\|_warn_once\|return _triton'
profile="scripts/gpu/round_profile.py --model qwen3.6-27b-shape --drafter published --adapter paper --reps 20 --top 14"
timeout "${UNROLL_AB:-120}" python3 $profile --specs ar --equal-tokens 32 2>&1 | grep -v "$drop" > "$OUT/profile_rule.txt"
timeout "${UNROLL_AB:-120}" python3 $profile --specs ar --inductor-pdl --equal-tokens 32 2>&1 | grep -v "$drop" \
  > "$OUT/profile_inductor_pdl.txt"
timeout "${UNROLL_AB:-120}" python3 $profile --specs ar --gemv-unrolled 2>&1 | grep -v "$drop" \
  > "$OUT/profile_unrolled.txt"
grep -H "ar step\|ar tokens" "$OUT"/profile_*.txt
