# Sourced by the device scripts (after setting OUT's default): strict mode, $OUT created, PYTHONPATH on src/,
# and `filter`, which drops the warning noise of torch.compile / the profiler from the logs kept under $OUT.
set -uo pipefail
mkdir -p "$OUT"
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
filter() { grep --line-buffered -v "Loading weights\|TensorFloat32\|warnings.warn\|USDT\|_warn_once\|Profiler clears\|Dynamo detected\|originates\|UserWarning\|^  File \|return _triton\|builders/weaver.py\|for _ in range\|warn_once\|rounds = \|Online softmax\|split the reduction\|important use case\|softmax\.$\|^$"; }
# profile NAME [VAR=value ...]: round_profile.py (--specs $PROFILE_SPECS, default ar chain:16 weaver:64) in an
# environment with the given settings, its log in $OUT/profile_NAME.txt; the stage rows echoed.
profile() {
  local name=$1; shift
  echo "### ${*:-defaults}" | tee "$OUT/profile_$name.txt"
  env "$@" timeout "${PROFILE_S:-100}" python3 scripts/gpu/round_profile.py --specs ${PROFILE_SPECS:-ar chain:16 weaver:64} \
    2>&1 | filter | tee -a "$OUT/profile_$name.txt" | grep -E "^## |^ar step|^(draft|build|verify|accept|commit|ROUND)|^timeline"
}
# scale NAME TIMEOUT ARGS...: one `weaver bench scale` run, its log in $OUT/NAME.txt, the rows echoed
scale() {
  local name=$1 limit=$2; shift 2
  timeout "$limit" python3 -m weaver.cli bench scale --model qwen3.6-27b-shape --device cuda --dtype bf16 \
    --verify-nodes --prefill --out "$OUT/$name" "$@" 2>&1 | filter > "$OUT/$name.txt"
  echo "## $name: $*"; grep -E "^copy|^(ar|chain|weaver) " "$OUT/$name.txt" | cut -c1-400
  grep -o -m 1 "One row of a large weight: [a-z]*" "$OUT/$name.txt"
}
