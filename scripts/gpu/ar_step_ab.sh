#!/usr/bin/env bash
# Issue 19, one device call (~550 s of command on a fresh machine): the 27B AR step, one process each, on one
# machine, most needed first, with the compiled kernel tests after the first two (AB_TESTS seconds, default 100;
# 0: none):
#   1. profile_base.txt: the session base (.baseline/src);
#   2. profile_new.txt: session 48's candidate (.candidate: the GDN decode conv in the in-projection GEMV's
#      epilogue, gdn_decode with PDL, the attention layers' K and V written in one Triton launch; a72b101, taken out
#      of the model again by the commit after it until a GPU has timed it);
#   3. the candidate's compiled kernel tests (scripts/gpu/kernel_tests.sh in .candidate);
#   4. profile_inductor_pdl.txt: the candidate with inductor's own kernels (the add + RMSNorm between the GEMVs, the
#      attention layers' q/k norm + RoPE) launched with programmatic dependent launch too (--inductor-pdl), so the
#      next GEMV's weight prefetch overlaps them;
#   5. profile_unrolled.txt: the candidate with the GEMV's K loop unrolled (--gemv-unrolled: UNROLLED_RULE's
#      configs, the down projection on the GEMV too; edit UNROLLED_RULE from gemv_wide_ab.py's sweep first).
# Runs 1, 2 and 4 then greedy-decode 32 tokens with ar and print them: the PDL changes decide which kernels may
# overlap, so their tokens must be the base's.
#   here:        rm -rf .baseline .candidate && mkdir .baseline .candidate
#                git archive 4e08341 src ':!src/weaver/assets' | tar -x -C .baseline
#                git archive a72b101 src tests pyproject.toml ':!src/weaver/assets' | tar -x -C .candidate
#                bash scripts/gpu/travel.sh light   # the shipped weights and results stay here (64 MiB a call)
#   device run:  source scripts/gpu/setup.sh; bash scripts/gpu/ar_step_ab.sh     (carry .whl .baseline .candidate)
set -uo pipefail
OUT=${OUT:-/tmp/ar_step_out}
mkdir -p "$OUT"
drop='UserWarning\|originates from\|^  File \|^$\|warn_once\|_warn_once\|return _triton'
profile="scripts/gpu/round_profile.py --model qwen3.6-27b-shape --drafter published --adapter paper --reps 20 --top 14"
run() {  # run NAME PYTHONPATH ARGS...
  local name=$1 path=$2
  shift 2
  PYTHONPATH=$path timeout "${AB_TIMEOUT:-110}" python3 $profile --specs ar "$@" 2>&1 | grep -v "$drop" \
    > "$OUT/profile_$name.txt"
  grep -H "ar step\|ar tokens" "$OUT/profile_$name.txt"
}
run base "/tmp/site:$PWD/.baseline/src" --equal-tokens 32
run new "/tmp/site:$PWD/.candidate/src" --equal-tokens 32
[ "${AB_TESTS:-100}" = 0 ] || bash scripts/gpu/kernel_tests.sh "${AB_TESTS:-100}" .candidate
run inductor_pdl "/tmp/site:$PWD/.candidate/src" --inductor-pdl --equal-tokens 32
run unrolled "/tmp/site:$PWD/.candidate/src" --gemv-unrolled
