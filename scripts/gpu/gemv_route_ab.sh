#!/usr/bin/env bash
# RuntimeOptions.gemv on an H200 (session 57): one row of a large weight through torch's BLAS (auto there, since
# cuBLAS read every 27B shape 1.03-1.21x faster than the best GEMV tiles: kernels/h200_session57_gemv) against
# weaver's Triton GEMV, in the deliverable's own report; one process a side, one call (~550 s cold). Only the AR
# step has one-row projections (a round's verify, draft and commit have 16-65 rows), so the A/B is the AR step's:
#   1. `weaver bench scale --methods ar` with the defaults (auto: blas on an H200);
#   2. the same with --gemv triton (the route before);
#   3. what time is left: the deliverable's report for ar, chain 16 and weaver 64 with the defaults.
#   device run (carry .whl):  source scripts/gpu/setup.sh; bash scripts/gpu/gemv_route_ab.sh
OUT=${OUT:-/tmp/gemv_route_out}
source scripts/gpu/common.sh
scale() {  # scale NAME TIMEOUT ARGS...: one `weaver bench scale` run, its log in $OUT/NAME.txt, the rows echoed
  local name=$1 limit=$2; shift 2
  timeout "$limit" python3 -m weaver.cli bench scale --model qwen3.6-27b-shape --device cuda --dtype bf16 \
    --verify-nodes --prefill --out "$OUT/$name" "$@" 2>&1 | filter > "$OUT/$name.txt"
  echo "## $name: $*"; grep -E "^copy|^(ar|chain|weaver) |One row" "$OUT/$name.txt" | cut -c1-400
}
scale ar_auto "${ROUTE_AR_S:-170}" --methods ar
scale ar_triton "${ROUTE_AR_S:-170}" --methods ar --gemv triton
scale scale "${ROUTE_SCALE_S:-330}" --methods ar chain weaver --budgets 64
