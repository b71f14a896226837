#!/usr/bin/env bash
# H200, issue 17: greedy losslessness of weaver on the GPU with a trained drafter + adapter, then the acceptance report.
# Needs the SmolLM2 GGUF joined by setup.sh (parts carried in earlier back-to-back calls) and the run directories in
# $RUNS (default ~/cache/runs: drafter/final, weaver/final) and the eval prompts in $EVAL (default ~/cache/eval).
#   1) scripts/gpu/weaver_lossless_debug.py: ar vs weaver / ddtree at budgets 16 and 64 under eager Triton, eager
#      torch, CUDA graphs, and compile + graphs (eager runs also compare the fused verify with the reference forward);
#   2) weaver bench acceptance, fp32 (greedy equality with ar, tau) and bf16 (tok/s), 3 prompts a workload.
OUT=${OUT:-/tmp/out}
RUNS=${RUNS:-$HOME/cache/runs}
EVAL=${EVAL:-$HOME/cache/eval}
source scripts/gpu/setup.sh
source scripts/gpu/common.sh
D="--drafter $RUNS/drafter/final --adapter $RUNS/weaver/final"
timeout ${DEBUG_S:-150} python3 scripts/gpu/weaver_lossless_debug.py $D --eval-dir "$EVAL" --configs triton torch triton+graphs \
  2>&1 | filter | tee "$OUT/lossless.txt"
timeout ${COMPILE_S:-120} python3 scripts/gpu/weaver_lossless_debug.py $D --eval-dir "$EVAL" --configs triton+graphs+compile \
  --methods weaver --prompts 1 2>&1 | filter | tee -a "$OUT/lossless.txt"
for dt in fp32 bf16; do
  timeout ${ACC_S:-130} python3 -m weaver.cli bench acceptance --eval-dir "$EVAL" $D --dtype $dt --no-compile --limit 3 \
    --budgets 16 64 --sampled-budget 0 --out "$OUT/acc_$dt" 2>&1 | filter | tee "$OUT/acc_$dt.log" | tail -30
done
