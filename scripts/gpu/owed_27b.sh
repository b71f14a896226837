#!/usr/bin/env bash
# Issue 19 on an H200, one device call (~550 s of command), most needed first; each step bounded so a cut call still
# returns what ran (every file is written under $OUT as it goes). Session 57's H200 call (scale/h200_session57) gave
# the rounds and showed cuBLAS reading every one-row 27B shape faster than weaver's GEMV there
# (kernels/h200_session57_gemv), so RuntimeOptions.gemv="auto" now takes BLAS on an H200. Only the AR step has
# one-row projections (a round's verify, draft and commit have 16-65 rows), so the A/B is the AR step's:
#   0. nothing on another GPU (an H100 has its figures: scale/h100_session56, h100_session60);
#   1. ar_auto: `weaver bench scale --methods ar` with the defaults (auto: blas on an H200);
#   2. ar_tma: the same with --gemv tma (session 58's gemv_tma: weight tiles through TMA; auto's route on an H100
#      since session 60, 1.1% faster than the Triton GEMV there);
#   3. ar_triton: the same with --gemv triton (the route of session 57's call), one process a side;
#   4. `gemv_wide_ab.py --norm`: what gemv_tma's in-kernel RMSNorm costs it; then `--kinds exact tma`: exact-cover
#      long tiles and gemv_tma's tilings against cuBLAS at every one-row shape;
#   5. scale: the deliverable's report for ar, chain 16 and weaver 64 with the defaults, in the call's time left.
#   device run:  source scripts/gpu/setup.sh; bash scripts/gpu/owed_27b.sh     (carry .whl)
# Then, on the warm H200, one call each (carry .whl):
#   weaver bench scale ... --methods chain weaver --budgets 64 --draft-vocab first:32768   the draft with a token map
#                                                           (issue 19's draft <= 1.7 ms: 1.72-1.75 with the whole head)
#   bash scripts/gpu/blas_ab.sh 27b:cublas 27b:cublaslt     cuBLASLt (RuntimeOptions.blas auto's choice at 27B since
#                                                           session 53, from H100 runs) against cuBLAS in the rounds
#   python3 -m pytest --triton-full -n 16 tests/kernels/test_weaver_frontier.py   the whole file
#   the rest of `bench scale` in parts (ddtree, budgets 16 / 32 / 128, verify alone, prefill), as in
#   benchmarks/results/scale/h100_session52/COMMAND.txt, then `weaver bench scale --merge` of every part.
OUT=${OUT:-/tmp/owed_out}
source scripts/gpu/common.sh
if ! nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  echo "not an H200: these figures are the H200's"
  exit 0
fi
# gemv_tma's compiled tests passed on an H100 (sm_90, the H200's arch: scale/h100_session60/tma_tests.txt); its AR
# step right after the default's, so that a call cut short (a late start on a low budget) still has the A/B
scale ar_auto "${OWED_AR_S:-170}" --methods ar
scale ar_tma "${OWED_AR_S:-170}" --methods ar --gemv tma
scale ar_triton "${OWED_AR_S:-170}" --methods ar --gemv triton
# what gemv_tma's in-kernel norm costs it (~30 s), then the GEMV kernels without register-held tiles, per shape
# against cuBLAS (exact-cover long tiles, gemv_tma's tilings; a line a shape), bounded by the call's time left
timeout 60 python3 scripts/gpu/gemv_wide_ab.py --norm 2>&1 | filter | tee "$OUT/gemv_tma_norm.txt"
sweep=$((575 - SECONDS)); [ "$sweep" -gt "${OWED_GEMV_S:-200}" ] && sweep=${OWED_GEMV_S:-200}
if [ "$sweep" -gt 30 ]; then
  timeout "$sweep" python3 scripts/gpu/gemv_wide_ab.py --kinds exact tma 2>&1 | filter > "$OUT/gemv_exact_tma.txt"
  grep -E "best/cuBLAS" "$OUT/gemv_exact_tma.txt" | cut -c1-300
fi
# the rounds last, in whatever is left of a 600 s call (session 57's rounds were measured with the same round code)
left=$((560 - SECONDS))
if [ "$left" -gt 120 ]; then scale scale "$left" --methods ar chain weaver --budgets 64; fi
