#!/usr/bin/env bash
# H200, issue 4: the Weaver step's fused path (candidate table, node attention, MLP GEMVs, scoring tail).
# One call, no GGUF:
#   1. the step kernels' compiled tests at full size against the references (and the top-k kernel's);
#   2. captured one-graph rounds with the fused step equal the ar tokens (rounds_check.py --quick, fp32 tiny llama);
#   3. round_profile.py ar + weaver budget 64 (AC_SPECS) four ways, in one run: without the candidate table and
#      the fused kernels (the v7 defaults), with the table alone, with both, and with the Triton bookkeeping of
#      the builder too (AC_PROFILES picks some: "a b c d").
#   device run:  bash scripts/gpu/adapter_check.sh      (results in $OUT)
set -uo pipefail
OUT=${OUT:-/tmp/adapter_out}
mkdir -p "$OUT"
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
filter() { grep -v "Loading weights\|TensorFloat32\|warnings.warn\|USDT\|_warn_once\|Profiler clears\|Dynamo detected\|originates\|weaver_builder_device.py\|for _ in range\|warn_once\|^$"; }
(cd tests/ops && timeout "${AC_TEST_S:-120}" python3 -m pytest --triton-full -q -p no:cacheprovider \
  ${AC_TESTS:-test_triton_pool_top.py test_triton_node_attention.py test_triton_topk.py test_triton_adapter_finish.py \
  test_triton_weaver_frontier.py} 2>&1 \
  | tail -4) | tee "$OUT/tests_gpu.txt"
WEAVER_FUSED_ADAPTER=1 timeout "${AC_CHECK_S:-150}" python3 scripts/gpu/rounds_check.py --quick 2>&1 | filter \
  | tee "$OUT/rounds_check.txt"
for p in ${AC_PROFILES:-a b c d}; do
  case $p in
    a) env="WEAVER_CANDIDATE_TABLE=0 WEAVER_FUSED_ADAPTER=0" ;;
    b) env="WEAVER_CANDIDATE_TABLE=1 WEAVER_FUSED_ADAPTER=0" ;;
    c) env="WEAVER_CANDIDATE_TABLE=1 WEAVER_FUSED_ADAPTER=1 WEAVER_FRONTIER_KERNELS=0" ;;
    d) env="WEAVER_CANDIDATE_TABLE=1 WEAVER_FUSED_ADAPTER=1 WEAVER_FRONTIER_KERNELS=1" ;;
  esac
  echo "### $env" | tee "$OUT/profile_$p.txt"
  env $env timeout "${AC_PROFILE_S:-150}" python3 scripts/gpu/round_profile.py --specs ${AC_SPECS:-ar weaver:64} \
    --top-build "${AC_TOP:-40}" 2>&1 | filter | tee -a "$OUT/profile_$p.txt"
done
