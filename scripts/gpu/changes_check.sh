#!/usr/bin/env bash
# H200, one call, no GGUF (carry .whl): check and time the CPU-written changes of the last session that no GPU has
# run yet, each step bounded so the call fits its 10 minutes (seconds: CC_TESTS 180, CC_PROFILE 390; 0 skips a
# step: the tests compile ~15 configurations, so for all of them run CC_PROFILE=0 CC_TESTS=540 first, then
# CC_TESTS=0 on the warm machine):
#   1. their tests compiled on the GPU, one line per test as it ends (a timeout keeps what passed): the GDN tree
#      kernel reading q / k / v as row views in bf16 (session 31: not bit-equal to contiguous inputs at a row width
#      that is no multiple of 16; the test now pads to 16 and compares bf16 at its rounding), the tree conv on a
#      column slice, the compiled hybrid verify against eager (CUDA, fp32 and bf16), the adapter finish at full
#      size, and greedy = ar through captured (and compiled) rounds on the tiny llama and
#      hybrid with the oracle drafter, so long paths are committed (issue 19's GPU lossless point; rounds_check.py
#      covers attention-only presets with random drafters, which accept ~nothing);
#   2. scripts/gpu/round_profile.py at the Qwen3.6-27B shape with bench scale's drafter and adapter (--drafter
#      published --adapter paper: z-lab's 5-layer shape, the released-variant adapter at d_rank 2048 with 16 heads,
#      which takes the Triton node attention), CC_SPECS (default weaver:64 chain:16): the stage table of issue 19's
#      targets (session 31 profiled random:5 / random:2048 only: chain 16 18.37 ms, weaver 64 22.37 ms).
#   device run:  source scripts/gpu/setup.sh && OUT=$OUT bash scripts/gpu/changes_check.sh
OUT=${OUT:-/tmp/changes_out}
source scripts/gpu/common.sh
step() { [ "${1:-1}" != "0" ]; }  # step SECONDS: false where the step's seconds are 0
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader | tee "$OUT/tests_gpu.txt"
step "${CC_TESTS:-180}" && timeout "${CC_TESTS:-180}" python3 -m pytest -v -p no:cacheprovider -p no:logging \
  --show-capture=no --tb=short --triton-full tests/kernels/test_gdn.py tests/kernels/test_conv.py \
  tests/speculative/test_compiled_verify.py tests/kernels/test_adapter_finish.py \
  tests/speculative/test_engine_lossless.py -k "row_views or slice or cuda or finish" 2>&1 \
  | grep --line-buffered "PASSED\|FAILED\|SKIPPED\|passed\|failed\|Error\|^E " | head -80 | tee -a "$OUT/tests_gpu.txt"
# shellcheck disable=SC2086
step "${CC_PROFILE:-390}" && timeout "${CC_PROFILE:-390}" python3 scripts/gpu/round_profile.py \
  --model qwen3.6-27b-shape --specs ${CC_SPECS:-weaver:64 chain:16} --drafter published --adapter paper --reps 20 \
  --top 12 --top-build 16 --equal-tokens ${CC_EQUAL:-64} 2>&1 | grep -v "Warning\|warn\|^ *$\|inline asm\|_tree_ops\|^ *return" \
  > "$OUT/profile_27b.txt"
grep -v "^   \|^--" "$OUT/profile_27b.txt" 2>/dev/null
