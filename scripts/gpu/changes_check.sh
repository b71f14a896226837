#!/usr/bin/env bash
# H200, one call, no GGUF (carry .whl): check and time the CPU-written changes of session 27 that no GPU has run
# yet, each step bounded so the call fits its 10 minutes (seconds: CC_TESTS, CC_CHECK, CC_PREFILL, CC_BENCH):
#   1. their tests compiled on the GPU: the one-launch ddtree selection, the structure kernel behind
#      `with_ancestors`, the fused prefill (FastVerifier without parents) against the torch forward, and the
#      graph-break test in the engine's own CUDA configuration;
#   2. greedy captured rounds equal `ar` (tiny llama, fp32, compiled stages: chain / ddtree / weaver);
#   3. scripts/gpu/prefill_ab.py: the torch-forward prefill against the fused one (SmolLM2 shape);
#   4. `weaver bench rounds` at the SmolLM2 shape: ar, chain, ddtree and weaver at budgets 15 (16 nodes: the
#      chain's verify rows), 16 and 64.
#   device run:  source scripts/gpu/setup.sh && OUT=$OUT bash scripts/gpu/changes_check.sh
OUT=${OUT:-/tmp/changes_out}
source scripts/gpu/common.sh
quiet() { filter | grep -v "^E[0-9]\{4\} \|^W[0-9]\{4\} "; }  # and dynamo's E/W log lines
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader | tee "$OUT/tests_gpu.txt"
timeout "${CC_TESTS:-150}" python3 -m pytest -q -p no:cacheprovider --triton-full tests/kernels/test_ddtree_select.py \
  tests/kernels/test_structure.py tests/models/test_fast_verify.py tests/speculative/test_fused_prefill.py \
  tests/speculative/test_graph_breaks.py 2>&1 | tail -15 | tee -a "$OUT/tests_gpu.txt"
timeout "${CC_CHECK:-150}" python3 scripts/gpu/rounds_check.py --quick 2>&1 | quiet | tee "$OUT/rounds_check.txt"
timeout "${CC_PREFILL:-100}" python3 scripts/gpu/prefill_ab.py --out "$OUT/prefill_ab.json" 2>&1 | quiet \
  | tee "$OUT/prefill_ab.txt"
timeout "${CC_BENCH:-170}" python3 -m weaver.cli bench rounds --model smollm2-shape --random-weights --device cuda \
  --drafter random:3 --adapter random:512 --methods ar chain ddtree weaver --budgets 15 16 64 \
  --out "$OUT/rounds.json" 2>&1 | quiet | tail -20 > "$OUT/rounds.log"
cat "$OUT/rounds.md" 2>/dev/null
