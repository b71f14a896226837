#!/usr/bin/env bash
# Issue 19 on an H200, one device call (~600 s of command): the figures its acceptance asks for, most needed first,
# each step bounded so a cut call still returns what ran (every file is written under $OUT as it goes).
#   0. nothing on another GPU (an H100 has its figures: scale/h100_session56);
#   1. scale/: `weaver bench scale` (the deliverable's own report) for ar, chain 16 and weaver 64: the AR step
#      against its floor, each round and its draft / build / verify / accept / commit;
#   2. gemv_m1.txt: weaver's GEMV against cuBLAS at M = 1 on the 27B shapes (its rule was chosen on an H100);
#      where cuBLAS wins, the AR step's rule needs an H200 entry.
#   device run:  source scripts/gpu/setup.sh; bash scripts/gpu/owed_27b.sh     (carry .whl)
# Then, on the warm H200, one call each (carry .whl):
#   bash scripts/gpu/gemv_tiles_ab.sh                       the down projection's gemv_tiles against cuBLAS
#   bash scripts/gpu/blas_ab.sh 27b:cublas 27b:cublaslt     cuBLASLt (RuntimeOptions.blas auto's choice at 27B since
#                                                           session 53, from H100 runs) against cuBLAS in the rounds
#   python3 -m pytest --triton-full -n 16 tests/kernels/test_weaver_frontier.py   the whole file (the last step
#                                                           below runs only the RoPE pop test)
#   the rest of `bench scale` in parts (ddtree, budgets 16 / 32 / 128, verify alone, prefill), as in
#   benchmarks/results/scale/h100_session52/COMMAND.txt, then `weaver bench scale --merge` of every part.
OUT=${OUT:-/tmp/owed_out}
source scripts/gpu/common.sh
if ! nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  echo "not an H200: these figures are the H200's"
  exit 0
fi
# the scale first: 398 s cold on an H100 (session 56), so it gets most of the call
timeout "${OWED_SCALE:-440}" python3 -m weaver.cli bench scale --model qwen3.6-27b-shape --device cuda --dtype bf16 \
  --methods ar chain weaver --budgets 64 --verify-nodes --prefill --out "$OUT/scale" 2>&1 | filter > "$OUT/scale.txt"
grep -E "^copy|^(ar|chain|weaver) " "$OUT/scale.txt"
timeout "${OWED_GEMV:-100}" python3 scripts/gpu/gemv_wide_ab.py > "$OUT/gemv_m1.txt" 2>&1
grep -h "best/cuBLAS" "$OUT/gemv_m1.txt"
# what time is left (~40 s): the compiled RoPE pop test (session 53's enable_fp_fusion=False; passed on an H100 in
# session 54)
timeout 45 python3 -m pytest --triton-full -q -rf --tb=short -p no:cacheprovider -n 8 \
  tests/kernels/test_weaver_frontier.py -k pop_with_node_inputs > "$OUT/pop_test.txt" 2>&1
tail -n 3 "$OUT/pop_test.txt"
