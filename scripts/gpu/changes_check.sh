#!/usr/bin/env bash
# H200, one call, no GGUF (carry .whl): check and time the CPU-written changes of the last session that no GPU has
# run yet, each step bounded so the call fits its 10 minutes (seconds: CC_TESTS, CC_AB, CC_BENCH):
#   1. their tests compiled on the GPU: the two-stage vocabulary top-k (`weaver.kernels.vocab_topk`), vocab_top1
#      (its combine now a shared jit helper), the ddtree selection at its warp counts, the fused prefill
#      (uncaptured, against the torch forward), and the graph-break test in the engine's own CUDA configuration (a
#      break names its file:line; session 28 left the hybrid's StepInputs fix untested there);
#   2. scripts/gpu/build_ab.py: torch.topk + logsumexp against the top-k kernel, and the selection per warp count;
#   3. `weaver bench rounds` at the SmolLM2 shape: ar, chain and ddtree at budgets 15, 16 and 64.
#   device run:  source scripts/gpu/setup.sh && OUT=$OUT bash scripts/gpu/changes_check.sh
OUT=${OUT:-/tmp/changes_out}
source scripts/gpu/common.sh
quiet() { filter | grep -v "^E[0-9]\{4\} \|^W[0-9]\{4\} "; }  # and dynamo's E/W log lines
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader | tee "$OUT/tests_gpu.txt"
timeout "${CC_TESTS:-150}" python3 -m pytest -q -p no:cacheprovider -p no:logging --show-capture=no --tb=short \
  --triton-full tests/kernels/test_vocab_topk.py tests/kernels/test_vocab_top1.py tests/kernels/test_ddtree_select.py \
  tests/speculative/test_fused_prefill.py tests/speculative/test_graph_breaks.py 2>&1 \
  | grep -v "^E[0-9]\{4\} \|^W[0-9]\{4\} \|DEBUG" | grep "passed\|failed\|Error\|^E \|^FAILED" | head -60 \
  | tee -a "$OUT/tests_gpu.txt"
timeout "${CC_AB:-100}" python3 scripts/gpu/build_ab.py --out "$OUT/build_ab.json" 2>&1 | quiet | tee "$OUT/build_ab.txt"
timeout "${CC_BENCH:-150}" python3 -m weaver.cli bench rounds --model smollm2-shape --random-weights --device cuda \
  --drafter random:3 --adapter random:512 --methods ar chain ddtree --budgets 15 16 64 \
  --out "$OUT/rounds.json" 2>&1 | quiet | tail -20 > "$OUT/rounds.log"
cat "$OUT/rounds.md" 2>/dev/null
