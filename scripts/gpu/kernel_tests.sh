#!/usr/bin/env bash
# The compiled kernel tests of the 27B path's kernels (the one-row GEMV, gdn_decode, the slot ops, the split and
# tree attention) into $OUT/tests.txt: -v names each test as it ends, so a run cut by its timeout still says which
# one failed.
#   bash scripts/gpu/kernel_tests.sh [SECONDS]   (default 150 s)
set -uo pipefail
OUT=${OUT:-/tmp/kernel_tests_out}
mkdir -p "$OUT"
timeout "${1:-150}" python3 -m pytest --triton-full -v -rf --tb=short -p no:cacheprovider -n 16 \
  tests/kernels/test_gemv_dispatch.py tests/kernels/test_gdn_decode.py tests/kernels/test_slots.py \
  tests/kernels/test_split_attention.py tests/kernels/test_tree_attention.py > "$OUT/tests.txt" 2>&1
grep -E "FAILED|ERROR|passed|failed" "$OUT/tests.txt" | tail -8
