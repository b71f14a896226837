#!/usr/bin/env bash
# H200, issue 4, one call with no GGUF: the round at SmolLM2-135M shapes with random weights (the preset
# `smollm2-shape`; a captured round's cost depends on shapes, not on weight values), bf16, random 3-layer
# drafter, random width-512 Weaver. Steps, each bounded so the call fits a few minutes:
#   1. the fused verify kernels compiled at full size against their references (WEAVER_FAST_VERIFY needs them);
#   2. captured rounds, one graph per round with compiled stages, equal the ar tokens (fp32 tiny llama);
#   3. `weaver bench rounds`: ar + chain (block 16), ar + weaver (budget 64); the round from one graph,
#      the stages from five.
#   device run:  bash scripts/gpu/rounds_quick.sh      (results in $OUT)
set -uo pipefail
OUT=${OUT:-/tmp/rounds_out}
mkdir -p "$OUT"
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
filter() { grep -v "Loading weights\|clean_up_tokenization\|TensorFloat32\|warnings.warn"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader | tee "$OUT/rounds_check.txt"
(cd tests/ops && timeout "${RQ_TEST:-75}" python3 -m pytest --triton-full -q -p no:cacheprovider \
  test_triton_verify.py 2>&1 | tail -3) | tee -a "$OUT/rounds_check.txt"
timeout "${RQ_CHECK:-80}" python3 scripts/gpu/rounds_check.py --quick 2>&1 | filter | tee -a "$OUT/rounds_check.txt"
for spec in "ar chain:16" "ar weaver:64"; do
  methods=$(echo $spec | sed 's/:[0-9]*//g'); budget=$(echo $spec | grep -o '[0-9]*$')
  name=rounds_h200_$(echo $spec | tr ' :' '__')
  timeout "${RQ_BENCH:-90}" python3 -m weaver.cli bench rounds --model smollm2-shape --random-weights --device cuda \
    --dtype bf16 --drafter random:3 --adapter random:512 --methods $methods --budgets $budget --new-tokens 64 \
    --out "$OUT/$name.json" 2>&1 | filter | tee "$OUT/$name.txt"
done
