#!/usr/bin/env bash
# H200: speculative round cost (issue 4). Needs part 2 of the GGUF carried (part 1 copied to ~/cache by
# the previous call) and .whl: see setup.sh.
# 1) captured rounds give exactly the ar tokens (fp32, tiny models); 2) per-stage device times of one
# round on SmolLM2 bf16 with a random 3-layer drafter and a random width-512 Weaver, ar in the same run.
set -e
source scripts/gpu/setup.sh
export WEAVER_FAST_VERIFY=1  # the fused Triton tree verify (opt-in); validate it first:
(cd tests/ops && WEAVER_TRITON_FULL=1 python3 -m pytest -q -p no:cacheprovider test_triton_verify.py 2>&1 | tail -3) \
  | tee "$OUT/tests_gpu.txt"
filter() { grep -v "Loading weights\|clean_up_tokenization\|TensorFloat32\|warnings.warn"; }
python3 -m weaver.cli models pull smollm2 2>&1 | tail -1
(WEAVER_COMPILE=0 python3 scripts/gpu/rounds_check.py; python3 scripts/gpu/rounds_check.py --quick) 2>&1 | filter \
  | tee "$OUT/rounds_check.txt"
for spec in "ar chain:16" "weaver:64"; do
  methods=$(echo $spec | sed 's/:[0-9]*//g'); budget=$(echo $spec | grep -o '[0-9]*$')
  name=rounds_h200_$(echo $spec | tr ' :' '__')
  python3 -m weaver.cli bench rounds --model smollm2 --device cuda --dtype bf16 --drafter random:3 --adapter random:512 \
    --methods $methods --budgets $budget --new-tokens 64 --out "$OUT/$name.json" 2>&1 | filter | tee "$OUT/$name.txt"
done
