#!/usr/bin/env bash
# H200, one call, no GGUF (carry .whl): check and time the CPU-written changes of the last session that no GPU has
# run yet, each step bounded so the call fits its 10 minutes (seconds: CC_TESTS, CC_VERIFY, CC_BENCH):
#   1. their tests compiled on the GPU: the compiled hybrid verify with the Triton GDN kernels, fp32 and bf16 (it
#      fell back to eager in session 29: `pdl_launch` left a defaulted constexpr out and torch 2.11's inductor
#      launched the kernel one argument short; now it always passes PDL), the PDL options, and the graph-break test;
#   2. scripts/gpu/hybrid_verify_ab.py at the Qwen3.6-27B shape: the verify eager against compiled (chain 16,
#      tree 64), the numbers session 26 measured before the fallback (16.47 / 19.01 ms);
#   3. `weaver bench rounds` at the SmolLM2 shape: ar, chain and ddtree at budgets 15 and 64 (every stage's
#      compile fallbacks are in rounds.json now).
#   device run:  source scripts/gpu/setup.sh && OUT=$OUT bash scripts/gpu/changes_check.sh
OUT=${OUT:-/tmp/changes_out}
source scripts/gpu/common.sh
quiet() { filter | grep -v "^E[0-9]\{4\} \|^W[0-9]\{4\} "; }  # and dynamo's E/W log lines
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader | tee "$OUT/tests_gpu.txt"
timeout "${CC_TESTS:-140}" python3 -m pytest -q -p no:cacheprovider -p no:logging --show-capture=no --tb=short \
  --triton-full tests/speculative/test_compiled_verify.py tests/kernels/test_tree_attention.py::test_programmatic_dependent_launch_only_compiled_on_hopper \
  tests/speculative/test_graph_breaks.py 2>&1 \
  | grep -v "^E[0-9]\{4\} \|^W[0-9]\{4\} \|DEBUG" | grep "passed\|failed\|Error\|^E \|^FAILED" | head -60 \
  | tee -a "$OUT/tests_gpu.txt"
timeout "${CC_VERIFY:-300}" python3 scripts/gpu/hybrid_verify_ab.py --shapes chain:16 tree:64 --out "$OUT/verify_ab.json" \
  2>&1 | quiet | grep -v "inline asm" | tee "$OUT/verify_ab.txt"
timeout "${CC_BENCH:-120}" python3 -m weaver.cli bench rounds --model smollm2-shape --random-weights --device cuda \
  --drafter random:3 --adapter random:512 --methods ar chain ddtree --budgets 15 64 \
  --out "$OUT/rounds.json" 2>&1 | quiet | tail -20 > "$OUT/rounds.log"
cat "$OUT/rounds.md" 2>/dev/null
