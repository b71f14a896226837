#!/usr/bin/env bash
# A build-stage change against the commit before it, in one call: the whole test_weaver_frontier.py compiled, then
# alternating passes of the weaver build alone (build_slope.py at its natural 16 pop rounds, SmolLM2's and the
# paper's adapter shapes) and the 135M engine's weaver-64 round with the shipped adapter (round_profile.py), the
# baseline's src first.
#   rm -rf .baseline && mkdir .baseline && git archive <commit> src | tar -x -C .baseline --exclude src/weaver/assets
#   device run (carry .whl .baseline):  source scripts/gpu/setup.sh; bash scripts/gpu/baseline_ab.sh
OUT=${OUT:-/tmp/baseline_ab_out}
source scripts/gpu/common.sh
timeout 120 python3 -m pytest --triton-full -q -rf --tb=short -p no:cacheprovider -n 16 \
  tests/kernels/test_weaver_frontier.py > "$OUT/frontier_tests.txt" 2>&1
tail -n 1 "$OUT/frontier_tests.txt"
for pass in ${AB_PASSES:-1 2}; do
  for side in before after; do
    src=$PWD/src
    [ "$side" = before ] && src=$PWD/.baseline/src
    PYTHONPATH=/tmp/site:$src timeout "${AB_BUILD_S:-150}" python3 scripts/gpu/build_slope.py --rounds 16 2>&1 | filter \
      > "$OUT/build_${side}_$pass.txt"
    PYTHONPATH=/tmp/site:$src timeout "${AB_ROUND_S:-120}" python3 scripts/gpu/round_profile.py --specs weaver:64 \
      --adapter "$PWD/src/weaver/assets/smollm2-weaver" --top 8 2>&1 | filter > "$OUT/round135m_${side}_$pass.txt"
    echo "$side $pass: build us (smollm2, paper) $(grep -E 'rounds +16' "$OUT/build_${side}_$pass.txt" |
      awk '{print $4}' | tr '\n' ' '); 135M weaver-64 build / round event ms $(grep -E '^(build|ROUND)' \
      "$OUT/round135m_${side}_$pass.txt" | awk '{print $(NF-4)}' | tr '\n' ' ')" | tee -a "$OUT/summary.txt"
  done
done
