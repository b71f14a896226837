#!/usr/bin/env bash
# H200, issue 4 (chain round, 1.67x an AR step against the 1.5x target): two levers written and CPU-tested
# without a GPU, both opt-in until this call has timed them. One call, no GGUF:
#   - WEAVER_VERIFY_QKV_ROPE=1: the verify's norm + qkv + qk-norm + RoPE + K/V write in one launch
#     (weaver.ops.triton.verify_qkv; removes 30 launches of ~2.2 us a SmolLM2 verify);
#   - WEAVER_DRAFT_ATTENTION=triton: the drafter block's attention through weaver.ops.node_attention (GQA)
#     instead of cuDNN SDPA (3 x ~9 us plus mask preparation a draft).
# Steps:
#   1. their compiled tests at full size against their references, FastVerifier end to end;
#   2. captured one-graph rounds with both on equal the ar tokens (rounds_check.py --quick, fp32 tiny llama);
#   3. round_profile.py ar + chain 16 + weaver 64: neither, the verify launch alone, both (one run: the A/B).
#   device run:  bash scripts/gpu/chain_levers_check.sh      (results in $OUT)
set -uo pipefail
OUT=${OUT:-/tmp/chain_levers_out}
mkdir -p "$OUT"
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
filter() { grep -v "Loading weights\|TensorFloat32\|warnings.warn\|USDT\|_warn_once\|Profiler clears\|Dynamo detected\|originates\|weaver_builder_device.py\|for _ in range\|warn_once\|rounds = \|^$"; }
(WEAVER_TRITON_FULL=1 timeout "${CL_TEST_S:-150}" python3 -m pytest -q -p no:cacheprovider \
  tests/ops/test_triton_verify_qkv.py tests/ops/test_triton_node_attention.py tests/models/test_fast_verify.py 2>&1 \
  | tail -4) | tee "$OUT/tests_gpu.txt"
WEAVER_VERIFY_QKV_ROPE=1 WEAVER_DRAFT_ATTENTION=triton timeout "${CL_CHECK_S:-120}" python3 scripts/gpu/rounds_check.py \
  --quick 2>&1 | filter | tee "$OUT/rounds_check.txt"
for p in ${CL_PROFILES:-base qkv both}; do
  case $p in
    base) env="WEAVER_VERIFY_QKV_ROPE=0 WEAVER_DRAFT_ATTENTION=sdpa" ;;
    qkv) env="WEAVER_VERIFY_QKV_ROPE=1 WEAVER_DRAFT_ATTENTION=sdpa" ;;
    both) env="WEAVER_VERIFY_QKV_ROPE=1 WEAVER_DRAFT_ATTENTION=triton" ;;
  esac
  echo "### $env" | tee "$OUT/profile_$p.txt"
  env $env timeout "${CL_PROFILE_S:-150}" python3 scripts/gpu/round_profile.py --specs ${CL_SPECS:-ar chain:16 weaver:64} \
    2>&1 | filter | tee -a "$OUT/profile_$p.txt"
done
