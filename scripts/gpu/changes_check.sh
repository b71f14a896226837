#!/usr/bin/env bash
# H200, one call, no GGUF (carry .whl): check and time the CPU-written changes of the last session that no GPU has
# run yet, each step bounded so the call fits its 10 minutes (seconds: CC_TESTS 180, CC_PROFILE 390; 0 skips a
# step: the tests compile ~15 configurations, so for all of them run CC_PROFILE=0 CC_TESTS=540 first, then
# CC_TESTS=0 on the warm machine):
#   1. their tests on the GPU, one line per test as it ends (a timeout keeps what passed). Session 32 wrote:
#      the candidate table from vocabulary-wide rows (bind fills `vocab_x` / `vocab_qkv` where the table is built;
#      test_weaver's vocab / table tests), the table's RoPE in one pass and a cat-free partial RoPE (test_rope), all
#      of which the captured / compiled rounds of test_engine_lossless's CUDA cases (oracle drafter: long paths,
#      tiny llama and hybrid, chain / ddtree / weaver) run on CUDA, plus the compiled hybrid verify against eager;
#   2. scripts/gpu/round_profile.py at the Qwen3.6-27B shape with bench scale's drafter and adapter (--drafter
#      published --adapter paper: z-lab's 5-layer shape, the released-variant adapter at d_rank 2048 with 16 heads,
#      which takes the Triton node attention), CC_SPECS (default weaver:64 chain:16): the stage table of issue 19's
#      targets (session 32, before this code: chain 16 18.24 ms, weaver 64 22.42 ms with a 2.04 ms build), then
#      --equal-tokens CC_EQUAL (64) against ar (run it alone, as scale/h200_session32 calls 3-4, if the profile's
#      timeout cuts it).
#   device run:  source scripts/gpu/setup.sh && OUT=$OUT bash scripts/gpu/changes_check.sh
OUT=${OUT:-/tmp/changes_out}
source scripts/gpu/common.sh
step() { [ "${1:-1}" != "0" ]; }  # step SECONDS: false where the step's seconds are 0
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader | tee "$OUT/tests_gpu.txt"
step "${CC_TESTS:-180}" && timeout "${CC_TESTS:-180}" python3 -m pytest -v -p no:cacheprovider -p no:logging \
  --show-capture=no --tb=short --triton-full tests/speculative/test_weaver.py tests/models/test_rope.py \
  tests/speculative/test_compiled_verify.py tests/speculative/test_engine_lossless.py \
  -k "vocab or table or rope or cuda" 2>&1 \
  | grep --line-buffered "PASSED\|FAILED\|SKIPPED\|passed\|failed\|Error\|^E " | head -80 | tee -a "$OUT/tests_gpu.txt"
# shellcheck disable=SC2086
step "${CC_PROFILE:-390}" && timeout "${CC_PROFILE:-390}" python3 scripts/gpu/round_profile.py \
  --model qwen3.6-27b-shape --specs ${CC_SPECS:-weaver:64 chain:16} --drafter published --adapter paper --reps 20 \
  --top 12 --top-build 16 --equal-tokens ${CC_EQUAL:-64} 2>&1 | grep -v "Warning\|warn\|^ *$\|inline asm\|_tree_ops\|^ *return" \
  > "$OUT/profile_27b.txt"
grep -v "^   \|^--" "$OUT/profile_27b.txt" 2>/dev/null
