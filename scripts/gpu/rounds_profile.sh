#!/usr/bin/env bash
# H200, issue 4: where the round's time goes, before and after the verify tuning (one call, no GGUF).
#   0. the fused verify kernels compiled at full size against their references (RP_TESTS=1);
#   1. round_profile.py: ar step, chain (block 16), weaver (budget 64), stage by stage, kernel by kernel
#      (RP_BEFORE=1, built-in launch configs);
#   2. verify_sweep.py: launch configs of the verify kernels at 16 / 65 rows -> a tuning table;
#   3. round_profile.py again with that table and the accept / commit stages compiled too.
#   device run:  bash scripts/gpu/rounds_profile.sh      (results in $OUT; bounds RP_PROFILE, RP_SWEEP)
set -uo pipefail
OUT=${OUT:-/tmp/rounds_out}
mkdir -p "$OUT"
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 WEAVER_FAST_VERIFY=1
filter() { grep -v "Loading weights\|TensorFloat32\|warnings.warn\|USDT\|_warn_once\|Profiler clears\|Dynamo detected\|originates\|weaver_builder_device.py\|for _ in range\|warn_once\|^$"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader | tee "$OUT/tests_gpu.txt"
if [ "${RP_TESTS:-1}" = "1" ]; then
  (cd tests/ops && WEAVER_TRITON_FULL=1 timeout "${RP_TEST_S:-120}" python3 -m pytest -q -p no:cacheprovider \
    test_triton_verify.py ${RP_TEST_FILES:-} 2>&1 | tail -5) | tee -a "$OUT/tests_gpu.txt"
fi
if [ "${RP_BEFORE:-1}" = "1" ]; then
  timeout "${RP_PROFILE:-200}" python3 scripts/gpu/round_profile.py --specs ar chain:16 weaver:64 2>&1 | filter \
    | tee "$OUT/profile_before.txt"
fi
# RP_GEMM_TABLE=<an earlier sweep's JSON>: sweep the attention kernels alone and take gemm_rows from that table
timeout "${RP_SWEEP:-200}" python3 scripts/gpu/verify_sweep.py --budget-s "${RP_SWEEP_BUDGET:-130}" \
  ${RP_GEMM_TABLE:+--kernels tree_attention tree_rope_kv_write} --out "$OUT/verify_sweep.json" 2>&1 | tee "$OUT/verify_sweep.txt" | tail -25
if [ -n "${RP_GEMM_TABLE:-}" ]; then
  python3 -c "import json, sys; t = json.load(open(sys.argv[1])); g = json.load(open(sys.argv[2]));
t['best']['gemm_rows'] = g['best']['gemm_rows']; t['gemm_rows_from'] = sys.argv[2]
json.dump(t, open(sys.argv[1], 'w'), indent=1)" "$OUT/verify_sweep.json" "$RP_GEMM_TABLE"
fi
WEAVER_TRITON_TUNING="$OUT/verify_sweep.json" WEAVER_COMPILE_STAGES=draft,build,accept,commit \
  timeout "${RP_PROFILE:-200}" python3 scripts/gpu/round_profile.py --specs ar chain:16 weaver:64 2>&1 | filter \
  | tee "$OUT/profile_tuned.txt"
