#!/usr/bin/env bash
# A GDN tree launch change inside the 27B weaver-64 round: `round_profile.py --gdn-config $GDN_CHANGE` against the
# default config, one process a side, in the order of AB_SIDES (the first compiles; the second reuses inductor's
# cache: the tree call is an opaque op, so only its launch config differs). Session 56 ran it with the change
# BVP=128 (the 65-node prep before b133d1e) as sides "new old" / "old new" (new = default, old = changed);
# session 60 with prefetch=1 (the prep's L2 prefetch, deleted after it: kernels/h100_session60_prefetch).
#   device run (carry .whl):  source scripts/gpu/setup.sh; GDN_CHANGE=BVP=128 bash scripts/gpu/prep_round_ab.sh
OUT=${OUT:-/tmp/prep_round_out}
source scripts/gpu/common.sh
change=${GDN_CHANGE:-BVP=128}
args=(--model qwen3.6-27b-shape --specs weaver:64 --drafter published --adapter paper --reps 20 --top 12)
for side in ${AB_SIDES:-default changed}; do
  extra=()
  [ "$side" = changed ] && extra=(--gdn-config "$change")
  timeout "${AB_ROUND_S:-280}" python3 scripts/gpu/round_profile.py "${args[@]}" "${extra[@]}" 2>&1 | filter \
    > "$OUT/round27b_$side.txt"
  echo "$side${extra[*]:+ (${extra[*]})}: $(grep -E '^(verify|ROUND)' "$OUT/round27b_$side.txt" |
    awk '{print $1, $(NF-4)}' | tr '\n' ' ') prep $(grep -m1 gdn_tree_prep_kernel "$OUT/round27b_$side.txt" |
    awk '{print $3}') us" | tee -a "$OUT/summary.txt"
done
