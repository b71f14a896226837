#!/usr/bin/env bash
# H200, one call, no GGUF (carry .whl): check and time the CPU-written changes that no GPU has run yet, each step
# bounded so the call fits its 10 minutes (seconds: CC_TESTS 180, CC_KERNELS 120, CC_PROFILE 390; 0 skips a step:
# the tests compile ~20 configurations, so run CC_PROFILE=0 CC_TESTS=450 first, then CC_TESTS=0 CC_KERNELS=0 on the
# warm machine):
#   1. their tests on the GPU, one line per test as it ends (a timeout keeps what passed). Session 33 wrote: the
#      GDN gates computed in the tree prep kernel from the in-projection's raw a and b (test_gdn raw_gates, the
#      tree ops' opcheck and compiled layer) and the root as a lead row outside the tiles, the default for bf16
#      trees of 2^k + 1 nodes (test_gdn lead / default_config / unset scratch, --triton-full: the 27B GDN shape
#      at T = 65 and 129); session 32: the candidate table from vocabulary-wide rows (test_weaver's vocab / table
#      tests), the table's RoPE in one pass and a cat-free partial RoPE (test_rope); the captured / compiled rounds
#      of test_engine_lossless's CUDA cases (oracle drafter: long paths, tiny llama and hybrid, chain / ddtree /
#      weaver) and the compiled hybrid verify against eager run all of it;
#   2. the GDN tree kernel alone at the 27B GDN shape, T = 17 and 65, the default (lead) against lead=False and
#      lead=True in one process (`bench kernels --sweep --sweep-from 15`; session 32 at T = 65 before this code:
#      24.6 us, and 16.1 at T = 64);
#   3. scripts/gpu/round_profile.py at the Qwen3.6-27B shape with bench scale's drafter and adapter (--drafter
#      published --adapter paper), CC_SPECS (default weaver:64 chain:16), every kernel listed (--top 400: the
#      verify's ~800 small kernels, by name): the stage table of issue 19's targets (session 32, before sessions
#      32-33's code: chain 16 18.24 ms, weaver 64 22.42 ms with a 2.04 ms build), then --equal-tokens CC_EQUAL (64)
#      against ar (run it alone, as scale/h200_session32 calls 3-4, if the profile's timeout cuts it).
#   device run:  source scripts/gpu/setup.sh && OUT=$OUT bash scripts/gpu/changes_check.sh
OUT=${OUT:-/tmp/changes_out}
source scripts/gpu/common.sh
step() { [ "${1:-1}" != "0" ]; }  # step SECONDS: false where the step's seconds are 0
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader | tee "$OUT/tests_gpu.txt"
step "${CC_TESTS:-180}" && timeout "${CC_TESTS:-180}" python3 -m pytest -v -p no:cacheprovider -p no:logging \
  --show-capture=no --tb=short --triton-full tests/kernels/test_gdn.py tests/kernels/test_gdn_tree_ops.py \
  tests/speculative/test_weaver.py tests/models/test_rope.py \
  tests/speculative/test_compiled_verify.py tests/speculative/test_engine_lossless.py \
  -k "raw_gates or lead or default_config or unset or opcheck or compiled_tree or vocab or table or rope or cuda" 2>&1 \
  | grep --line-buffered "PASSED\|FAILED\|SKIPPED\|passed\|failed\|Error\|^E " | head -80 | tee -a "$OUT/tests_gpu.txt"
step "${CC_KERNELS:-120}" && timeout "${CC_KERNELS:-120}" python3 -m weaver.cli bench kernels --T 17 65 \
  --kinds tree --methods fused_kernel --sweep --sweep-from 15 --reps 60 --out "$OUT/kernels" 2>&1 \
  | grep -v "Warning\|warn" | tail -30 > "$OUT/kernels_lead.txt"
# shellcheck disable=SC2086
step "${CC_PROFILE:-390}" && timeout "${CC_PROFILE:-390}" python3 scripts/gpu/round_profile.py \
  --model qwen3.6-27b-shape --specs ${CC_SPECS:-weaver:64 chain:16} --drafter published --adapter paper --reps 20 \
  --top 400 --top-build 40 --equal-tokens ${CC_EQUAL:-64} 2>&1 | grep -v "Warning\|warn\|^ *$\|inline asm\|_tree_ops\|^ *return" \
  > "$OUT/profile_27b.txt"
grep -v "^   \|^--" "$OUT/profile_27b.txt" 2>/dev/null
