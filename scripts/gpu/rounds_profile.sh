#!/usr/bin/env bash
# H200, issue 4: where the round's time goes (one call, no GGUF; SmolLM2 shapes with random weights).
#   0. RP_TESTS=1   the fused verify and top-k kernels compiled at full size against their references;
#   1. RP_CHECK=1   captured rounds (one graph per round, default compiled stages) equal the ar tokens
#                   (scripts/gpu/rounds_check.py --quick, fp32 tiny llama);
#   2. RP_BEFORE=0  round_profile.py with the built-in launch configs (WEAVER_TRITON_TUNING=none);
#   3. RP_SWEEP=0   verify_sweep.py -> a tuning table, used by step 4 (RP_WIDE_K=1: BLOCK_K 512 tiles too;
#                   RP_GEMM_TABLE=<an earlier sweep's
#                   JSON>: sweep the attention kernels alone, take gemm_rows from that table);
#   4. round_profile.py: ar step, chain (block 16), weaver (budget 64), stage by stage and kernel by kernel,
#      with the defaults (the packaged H200 table, every stage but verify compiled) or step 3's table.
#   device run:  bash scripts/gpu/rounds_profile.sh      (results in $OUT)
OUT=${OUT:-/tmp/rounds_out}
source "$(dirname "$0")/common.sh"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader | tee "$OUT/tests_gpu.txt"
if [ "${RP_TESTS:-1}" = "1" ]; then
  (cd tests/ops && timeout "${RP_TEST_S:-150}" python3 -m pytest --triton-full -q -p no:cacheprovider \
    test_triton_verify.py test_triton_topk.py 2>&1 | tail -5) | tee -a "$OUT/tests_gpu.txt"
fi
if [ "${RP_CHECK:-1}" = "1" ]; then
  timeout "${RP_CHECK_S:-150}" python3 scripts/gpu/rounds_check.py --quick 2>&1 | filter | tee "$OUT/rounds_check.txt"
fi
if [ "${RP_BEFORE:-0}" = "1" ]; then
  WEAVER_TRITON_TUNING=none timeout "${RP_PROFILE:-200}" python3 scripts/gpu/round_profile.py \
    --specs ar chain:16 weaver:64 2>&1 | filter | tee "$OUT/profile_before.txt"
fi
if [ "${RP_SWEEP:-0}" = "1" ]; then
  timeout "${RP_SWEEP_S:-200}" python3 scripts/gpu/verify_sweep.py --budget-s "${RP_SWEEP_BUDGET:-130}" \
    ${RP_WIDE_K:+--wide-k} \
    ${RP_GEMM_TABLE:+--kernels tree_attention tree_rope_kv_write} --out "$OUT/verify_sweep.json" 2>&1 \
    | tee "$OUT/verify_sweep.txt" | tail -25
  if [ -n "${RP_GEMM_TABLE:-}" ]; then
    python3 -c "import json, sys; t = json.load(open(sys.argv[1])); g = json.load(open(sys.argv[2]));
t['best']['gemm_rows'] = g['best']['gemm_rows']; t['gemm_rows_from'] = sys.argv[2]
json.dump(t, open(sys.argv[1], 'w'), indent=1)" "$OUT/verify_sweep.json" "$RP_GEMM_TABLE"
  fi
  export WEAVER_TRITON_TUNING="$OUT/verify_sweep.json"
fi
timeout "${RP_PROFILE:-200}" python3 scripts/gpu/round_profile.py --specs ar chain:16 weaver:64 2>&1 | filter \
  | tee "$OUT/profile.txt"
