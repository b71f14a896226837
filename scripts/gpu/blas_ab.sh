#!/usr/bin/env bash
# Issue 19: torch's preferred BLAS library for the rounds' GEMMs. Session 51's sweep (scale/h100_session51/call10)
# timed cuBLASLt faster than torch's default cuBLAS on the 27B down projection (17 rows 63.1 against 65.6 us,
# 65 rows 63.6 against 70.1) and the drafter's fc (89.1 against 92.2), and equal on the other shapes. Here the whole
# rounds, one process a run (round_profile.py --blas), ar / chain:16 / weaver:64 at the 27B shape or the 135M
# shape: a process-wide default must not lose in either regime. Runs are MODEL:LIBRARY, in the order given, so
# alternate them; a cold 27B run compiles for ~250 s, a warm one ~150 s, a 135M one ~60 s.
#   device run (carry .whl):  source scripts/gpu/setup.sh; bash scripts/gpu/blas_ab.sh 27b:cublas 27b:cublaslt
#   then on the warm machine: bash scripts/gpu/blas_ab.sh 27b:cublaslt 27b:cublas 135m:cublas 135m:cublaslt
OUT=${OUT:-/tmp/blas_ab_out}
mkdir -p "$OUT"
big="--model qwen3.6-27b-shape --drafter published --adapter paper --specs ar chain:16 weaver:64 --reps 20 --top 6"
small="--model smollm2-shape --specs ar chain:16 weaver:64 --reps 40 --top 6"
for run in "$@"; do
  model=${run%%:*}
  library=${run#*:}
  args=$big
  [ "$model" = 135m ] && args=$small
  log="$OUT/$(date +%H%M%S)_${model}_$library.txt"
  # shellcheck disable=SC2086
  timeout "${BLAS_TIMEOUT:-280}" python3 scripts/gpu/round_profile.py $args --blas "$library" > "$log" 2>&1
  echo "$model $library (ar step, chain-16 round, weaver-64 round, event ms):" \
    "$(grep -E '^(ar step|ROUND)' "$log" | awk '{print $(NF-4)}' | tr '\n' ' ')" | tee -a "$OUT/summary.txt"
done
