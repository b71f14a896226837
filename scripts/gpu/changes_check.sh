#!/usr/bin/env bash
# H200, one call, no GGUF (carry .whl): check and time the CPU-written changes of the last session that no GPU has
# run yet, each step bounded so the call fits its 10 minutes (seconds: CC_TESTS, CC_CHECK, CC_VERIFY, CC_BENCH):
#   1. their tests compiled on the GPU, one line per test as it ends (a timeout keeps what passed): the GDN tree
#      kernels as custom ops at the Qwen3.6-27B GDN widths (session 30: traced by inductor, the compiled hybrid
#      verify hit an illegal memory access at those widths; the tiny hybrid ran), the compiled hybrid verify
#      against eager (tiny, fp32 and bf16), the PDL options, the graph-break test;
#   2. scripts/gpu/hybrid_verify_check.py: the compiled verify's logits and GDN factors against eager at the 27B
#      widths with 4 layers (seconds to compile), chain 17 and tree 65;
#   3. scripts/gpu/hybrid_verify_ab.py at the full Qwen3.6-27B shape: the verify eager against compiled (chain 16,
#      tree 64), the numbers session 26 measured before the stacked commit (16.47 / 19.01 ms);
#   4. `weaver bench rounds` at the SmolLM2 shape: ar, chain and ddtree at budgets 15 and 64.
#   device run:  source scripts/gpu/setup.sh && OUT=$OUT bash scripts/gpu/changes_check.sh
#   (the defaults add up to more than one call: lower CC_VERIFY / CC_BENCH, or run step 3 in a second call;
#   a step whose seconds are 0 is skipped; CC_SHAPES / CC_MODES: hybrid_verify_ab.py's --shapes / --modes)
OUT=${OUT:-/tmp/changes_out}
source scripts/gpu/common.sh
quiet() { filter | grep -v "^E[0-9]\{4\} \|^W[0-9]\{4\} "; }  # and dynamo's E/W log lines
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader | tee "$OUT/tests_gpu.txt"
step() { [ "${1:-1}" != "0" ]; }  # step SECONDS: false where the step's seconds are 0
step "${CC_TESTS:-200}" && timeout "${CC_TESTS:-200}" python3 -m pytest -v -p no:cacheprovider -p no:logging --show-capture=no --tb=short \
  --triton-full tests/kernels/test_gdn_tree_ops.py tests/speculative/test_compiled_verify.py \
  tests/kernels/test_tree_attention.py::test_programmatic_dependent_launch_only_compiled_on_hopper \
  tests/speculative/test_graph_breaks.py 2>&1 \
  | grep --line-buffered "PASSED\|FAILED\|SKIPPED\|passed\|failed\|Error\|^E " | head -80 | tee -a "$OUT/tests_gpu.txt"
step "${CC_CHECK:-150}" && for shape in "chain 17" "tree 65"; do
  set -- $shape
  CUDA_LAUNCH_BLOCKING=1 timeout "${CC_CHECK:-150}" python3 scripts/gpu/hybrid_verify_check.py --layers 4 --kind $1 \
    --nodes $2 2>&1 | quiet | grep -v "lru_cache\|originates\|warn_once\|_tree_ops\|^ *return\|^$" \
    | tail -30 | tee -a "$OUT/verify_check.txt"
done
step "${CC_VERIFY:-300}" && timeout "${CC_VERIFY:-300}" python3 scripts/gpu/hybrid_verify_ab.py \
  --shapes ${CC_SHAPES:-chain:16 tree:64} --modes ${CC_MODES:-eager compiled} --out "$OUT/verify_ab.json" \
  2>&1 | quiet | grep -v "inline asm" | tee "$OUT/verify_ab.txt"
step "${CC_BENCH:-120}" && timeout "${CC_BENCH:-120}" python3 -m weaver.cli bench rounds --model smollm2-shape --random-weights --device cuda \
  --drafter random:3 --adapter random:512 --methods ar chain ddtree --budgets 15 64 \
  --out "$OUT/rounds.json" 2>&1 | quiet | tail -20 > "$OUT/rounds.log"
cat "$OUT/rounds.md" 2>/dev/null
