#!/usr/bin/env bash
# H200, issue 4 (chain round 1.65x an AR step in h200_v12, target 1.5x): two more levers, one call, no GGUF:
#   - the fused draft (weaver.spec.fast_drafter, on by default on CUDA; WEAVER_FAST_DRAFT=0 is the torch draft,
#     torch.compile'd: ~55 kernels for the 3-layer drafter against ~22 launches);
#   - WEAVER_GEMM_NORM=late: the row-tiled GEMM's RMSNorm scales the accumulator after the K loop instead of
#     a first pass over x before the weight loads (qkv, gate/up: 60 launches a verify).
# Steps:
#   1. compiled tests at full size: fused_gemv rows (late norm and out= included), the fast draft and the fast
#      verify against their torch references;
#   2. captured one-graph rounds with both on equal the ar tokens (rounds_check.py --quick, fp32 tiny llama);
#   3. round_profile.py ar + chain 16 + weaver 64 with neither, each, both (one run: the A/B).
#   device run:  bash scripts/gpu/chain_round_check.sh      (results in $OUT)
set -uo pipefail
OUT=${OUT:-/tmp/chain_round_out}
mkdir -p "$OUT"
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
filter() { grep -v "Loading weights\|TensorFloat32\|warnings.warn\|USDT\|_warn_once\|Profiler clears\|Dynamo detected\|originates\|weaver_builder_device.py\|for _ in range\|warn_once\|rounds = \|Online softmax\|split the reduction\|important use case\|softmax\.$\|^$"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader | tee "$OUT/tests_gpu.txt"
(WEAVER_TRITON_FULL=1 timeout "${CR_TEST_S:-150}" python3 -m pytest -q -p no:cacheprovider \
  tests/ops/test_triton_verify.py tests/spec/test_fast_drafter.py tests/models/test_fast_verify.py 2>&1 \
  | tail -8) | tee -a "$OUT/tests_gpu.txt"
WEAVER_GEMM_NORM=late timeout "${CR_CHECK_S:-120}" python3 scripts/gpu/rounds_check.py --quick 2>&1 | filter \
  | tee "$OUT/rounds_check.txt"
for p in ${CR_PROFILES:-base draft late both}; do
  case $p in
    base) env="WEAVER_FAST_DRAFT=0 WEAVER_GEMM_NORM=pre" ;;
    draft) env="WEAVER_FAST_DRAFT=1 WEAVER_GEMM_NORM=pre" ;;
    late) env="WEAVER_FAST_DRAFT=0 WEAVER_GEMM_NORM=late" ;;
    both) env="WEAVER_FAST_DRAFT=1 WEAVER_GEMM_NORM=late" ;;
  esac
  echo "### $env" | tee "$OUT/profile_$p.txt"
  env $env timeout "${CR_PROFILE_S:-120}" python3 scripts/gpu/round_profile.py --specs ${CR_SPECS:-ar chain:16 weaver:64} \
    2>&1 | filter | tee -a "$OUT/profile_$p.txt" | grep -E "^## |^ar step|^(draft|build|verify|accept|commit|ROUND)"
done
