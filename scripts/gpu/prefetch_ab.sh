#!/usr/bin/env bash
# GDNTreeConfig.prefetch (the prep items ask L2 for their cold lines first) against the default, one call (~400 s
# cold): the equality test compiled, the prep after a GEMM at 17 / 65 / 129 nodes (and without the lead row: at 129
# nodes ptxas gives the lead-row prep 288 B of stack against 160), then the 27B weaver-64 round.
#   device run (carry .whl):  source scripts/gpu/setup.sh; bash scripts/gpu/prefetch_ab.sh
OUT=${OUT:-/tmp/prefetch_ab_out}
source scripts/gpu/common.sh
timeout 90 python3 -m pytest --triton-full -q -rf --tb=short -p no:cacheprovider -n 8 tests/kernels/test_gdn.py \
  -k prefetch > "$OUT/prefetch_test.txt" 2>&1
tail -n 1 "$OUT/prefetch_test.txt"
timeout 120 python3 scripts/gpu/prep_ab.py --T 65 129 17 --variants model --configs default prefetch=1 lead=0 \
  --between-gemm-mb 200 2>&1 | grep -v Warn > "$OUT/prep_prefetch.txt"
python3 - "$OUT/prep_prefetch.txt" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    row = json.loads(line) if line.startswith("{") else {}
    if "tree" in row:
        print(row["T"], row["tree"], row["change"], *(row.get(k) for k in ("call_us", "ctx_call_us", "prep_us",
              "ctx_prep_us", "max_abs_diff_vs_first")))
PY
GDN_CHANGE=prefetch=1 bash scripts/gpu/prep_round_ab.sh
