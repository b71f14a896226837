#!/usr/bin/env bash
# H200, issue 4 (chain round 1.65x an AR step in h200_v12, target 1.5x): the round's launch count, one call, no GGUF.
#   h200_v13 timed the fused draft (on by default since) and the late-norm GEMM (slower, removed). This call
#   A/B's two more, in one run (each profile one process; the AR step measured in each):
#   - WEAVER_ROPE_ATTENTION=1: qk-norm + RoPE + K/V write inside the tree-attention launch (fast verify and
#     fast draft: 33 launches a chain round fewer);
#   - WEAVER_VOCAB_TOP1=1: greedy argmax / max log-softmax over the vocabulary in a two-stage Triton reduction
#     (chain build, accept, and the AR step's own argmax).
# Steps:
#   1. compiled tests at full size: the verify kernels (tree_attention_rope included), vocab top-1, the fast
#      draft and the fast verify against their references;
#   2. captured one-graph rounds with the defaults equal the ar tokens (rounds_check.py --quick, fp32 tiny llama);
#   3. round_profile.py ar + chain 16 + weaver 64 per profile.
#   device run:  bash scripts/gpu/chain_round_check.sh      (results in $OUT)
OUT=${OUT:-/tmp/chain_round_out}
source "$(dirname "$0")/common.sh"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader | tee "$OUT/tests_gpu.txt"
(timeout "${CR_TEST_S:-150}" python3 -m pytest --triton-full -q -p no:cacheprovider -x -rf \
  ${CR_TESTS:-tests/kernels/test_tree_attention.py tests/kernels/test_vocab_top1.py tests/spec/test_fast_drafter.py \
  tests/models/test_fast_verify.py} 2>&1 | tail -8) | tee -a "$OUT/tests_gpu.txt"
timeout "${CR_CHECK_S:-100}" python3 scripts/gpu/rounds_check.py --quick 2>&1 | filter | tee "$OUT/rounds_check.txt"
for p in ${CR_PROFILES:-prev rope all}; do
  case $p in
    prev) env="WEAVER_ROPE_ATTENTION=0 WEAVER_VOCAB_TOP1=0" ;;
    rope) env="WEAVER_ROPE_ATTENTION=1 WEAVER_VOCAB_TOP1=0" ;;
    all) env="WEAVER_ROPE_ATTENTION=1 WEAVER_VOCAB_TOP1=1" ;;
  esac
  echo "### $env" | tee "$OUT/profile_$p.txt"
  env $env timeout "${CR_PROFILE_S:-120}" python3 scripts/gpu/round_profile.py --specs ${CR_SPECS:-ar chain:16 weaver:64} \
    2>&1 | filter | tee -a "$OUT/profile_$p.txt" | grep -E "^## |^ar step|^(draft|build|verify|accept|commit|ROUND)"
done
