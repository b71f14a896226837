#!/usr/bin/env bash
# H200: speculative round cost (issue 4). Needs part 2 of the GGUF carried (part 1 copied to ~/cache by
# the previous call) and .whl: see setup.sh. Steps (each can be switched off to fit a 10-minute call):
#   ROUNDS_TESTS=1  the Triton verify / decode kernels compiled at full size against their references
#   ROUNDS_CHECK=1  captured rounds (one graph per round, and one per stage) give exactly the ar tokens
#   ROUNDS_SWEEP=0  scripts/gpu/verify_sweep.py (~3 min), then the benches with its table
#                   (WEAVER_TRITON_TUNING): files *_tuned.* (independent of ROUNDS_BENCH)
#   ROUNDS_BENCH=1  SmolLM2 bf16, random 3-layer drafter, random width-512 Weaver: ar + chain (block 16)
#                   and ar + weaver (budget 64); the round from one captured graph, stages from five
set -e
source scripts/gpu/setup.sh
filter() { grep -v "Loading weights\|clean_up_tokenization\|TensorFloat32\|warnings.warn"; }
if [ "${ROUNDS_TESTS:-1}" = "1" ]; then
  (cd tests/ops && python3 -m pytest --triton-full -q -p no:cacheprovider test_triton_verify.py \
    test_triton_decode.py 2>&1 | tail -3) | tee "$OUT/tests_gpu.txt"
fi
python3 -m weaver.cli models pull smollm2 2>&1 | tail -1
if [ "${ROUNDS_CHECK:-1}" = "1" ]; then
  (python3 scripts/gpu/rounds_check.py --no-compile; python3 scripts/gpu/rounds_check.py --quick) 2>&1 | filter \
    | tee "$OUT/rounds_check.txt"
fi
bench() {  # $1: file suffix
  for spec in "ar chain:16" "ar weaver:64"; do
    methods=$(echo $spec | sed 's/:[0-9]*//g'); budget=$(echo $spec | grep -o '[0-9]*$')
    name=rounds_h200_$(echo $spec | tr ' :' '__')$1
    python3 -m weaver.cli bench rounds --model smollm2 --device cuda --dtype bf16 --drafter random:3 \
      --adapter random:512 --methods $methods --budgets $budget --new-tokens 64 --out "$OUT/$name.json" 2>&1 \
      | filter | tee "$OUT/$name.txt"
  done
}
if [ "${ROUNDS_BENCH:-1}" = "1" ]; then
  bench ""
fi
if [ "${ROUNDS_SWEEP:-0}" = "1" ]; then
  python3 scripts/gpu/verify_sweep.py --out "$OUT/verify_sweep.json" 2>&1 | tee "$OUT/verify_sweep.txt"
  WEAVER_TRITON_TUNING="$OUT/verify_sweep.json" bench _tuned
fi
