#!/usr/bin/env bash
# H200, issue 4 (chain round 1.58x an AR step in h200_v15, target 1.5x): the 16-row GEMMs, one call.
#   The chain verify's GEMMs have 18-48 output tiles for 132 SMs (h200_v15: 4.78 us a launch against 3.58 for
#   the AR step's GEMV); GemmTiles.split_k spreads K over more programs, the last of a tile sums the partials.
#   h200_v16 (split-K alone): little gain, but the GEMMs with an RMSNorm cost ~2 us more than those without;
#   SK_NORM_STATS=1 (the default) times the hand-off of the norm statistics (WEAVER_NORM_STATS) with it.
#   1. compiled tests at full size: fused_gemv's row tiles (split-K included, and replayed in a CUDA graph,
#      the statistics hand-off), the fast verify and the fast draft;
#   2. verify_sweep.py over the 16-row GEMM shapes (target and fused draft) with BLOCK_K 512 and split-K;
#   3. table.json = the packaged H200 table with the sweep's best 16-row gemm_rows entries put in;
#   4. rounds_check.py --quick under table.json (captured rounds equal the ar tokens);
#   5. round_profile.py ar + chain 16 + weaver 64 with the packaged table (before; WEAVER_NORM_STATS=0 with
#      SK_NORM_STATS=1), then table.json (after).
#   device run:  bash scripts/gpu/split_k_check.sh      (results in $OUT)
OUT=${OUT:-/tmp/split_k_out}
source "$(dirname "$0")/common.sh"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader | tee "$OUT/tests_gpu.txt"
(WEAVER_TRITON_FULL=1 timeout "${SK_TEST_S:-90}" python3 -m pytest -q -p no:cacheprovider -x -rf \
  tests/ops/test_triton_verify.py -k "fused_gemv" 2>&1 | tail -6) | tee -a "$OUT/tests_gpu.txt"
if [ "${SK_NORM_STATS:-1}" = "1" ]; then
  (WEAVER_TRITON_FULL=1 timeout "${SK_TEST2_S:-80}" python3 -m pytest -q -p no:cacheprovider -x -rf \
    tests/models/test_fast_verify.py tests/spec/test_fast_drafter.py 2>&1 | tail -6) | tee -a "$OUT/tests_gpu.txt"
fi
timeout "${SK_SWEEP_S:-200}" python3 scripts/gpu/verify_sweep.py --budget-s "${SK_SWEEP_BUDGET:-140}" \
  --kernels gemm_rows --rows 16 --gemms qkv+norm o+res gate_up+norm+swiglu down+res q+norm kv+norm \
  --wide-k --split-k 2 3 4 6 $([ "${SK_NORM_STATS:-1}" = 1 ] && echo --norm-stats) --out "$OUT/sweep.json" 2>&1 | tee "$OUT/sweep.txt" | tail -12
PACKAGED=$(python3 -c "from weaver.ops.triton import tuning; print(tuning.PACKAGED['H200'])")
python3 - "$PACKAGED" "$OUT/sweep.json" "$OUT/table.json" <<'PY'
import json, sys
table, sweep = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
for key, entry in sweep["best"].get("gemm_rows", {}).items():
    table["best"].setdefault("gemm_rows", {})[key] = entry
    print("table:", key, entry["config"], f"{entry['us']:.2f} us")
json.dump(table, open(sys.argv[3], "w"), indent=1)
PY
WEAVER_TRITON_TUNING="$OUT/table.json" timeout "${SK_CHECK_S:-80}" python3 scripts/gpu/rounds_check.py --quick 2>&1 \
  | filter | tee "$OUT/rounds_check.txt" | tail -4

for p in before after; do
  table=$PACKAGED; stats=0; [ $p = after ] && table="$OUT/table.json" && stats=${SK_NORM_STATS:-1}
  echo "### WEAVER_TRITON_TUNING=$table WEAVER_NORM_STATS=$stats" | tee "$OUT/profile_$p.txt"
  WEAVER_NORM_STATS=$stats WEAVER_TRITON_TUNING=$table timeout "${SK_PROFILE_S:-110}" python3 scripts/gpu/round_profile.py \
    --specs ${SK_SPECS:-ar chain:16 weaver:64} 2>&1 | filter | tee -a "$OUT/profile_$p.txt" \
    | grep -E "^## |^ar step|^(draft|build|verify|accept|commit|ROUND)"
done
