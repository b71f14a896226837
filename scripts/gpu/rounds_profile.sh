#!/usr/bin/env bash
# H200, issue 4: where the round's time goes, before and after the verify tuning (one call, no GGUF).
#   1. round_profile.py: ar step, chain (block 16), weaver (budget 64), stage by stage, kernel by kernel;
#   2. verify_sweep.py: launch configs of the verify kernels at 16 / 65 rows -> a tuning table;
#   3. round_profile.py again with that table and the accept / commit stages compiled too.
#   device run:  bash scripts/gpu/rounds_profile.sh      (results in $OUT; bounds RP_PROFILE, RP_SWEEP)
set -uo pipefail
OUT=${OUT:-/tmp/rounds_out}
mkdir -p "$OUT"
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 WEAVER_FAST_VERIFY=1
filter() { grep -v "Loading weights\|clean_up_tokenization\|TensorFloat32\|warnings.warn\|USDT"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader | tee "$OUT/profile_before.txt"
timeout "${RP_PROFILE:-200}" python3 scripts/gpu/round_profile.py --specs ar chain:16 weaver:64 2>&1 | filter \
  | tee -a "$OUT/profile_before.txt"
timeout "${RP_SWEEP:-170}" python3 scripts/gpu/verify_sweep.py --budget-s "${RP_SWEEP_BUDGET:-110}" \
  --out "$OUT/verify_sweep.json" 2>&1 | tee "$OUT/verify_sweep.txt" | tail -40
WEAVER_TRITON_TUNING="$OUT/verify_sweep.json" WEAVER_COMPILE_STAGES=draft,build,accept,commit \
  timeout "${RP_PROFILE:-200}" python3 scripts/gpu/round_profile.py --specs chain:16 weaver:64 2>&1 | filter \
  | tee "$OUT/profile_tuned.txt"
