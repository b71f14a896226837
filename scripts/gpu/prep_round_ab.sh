#!/usr/bin/env bash
# Session 55's GDN prep rule (b133d1e: a 65-node prep's state items at 64 value columns) inside the 27B weaver-64
# round, against the rule before it (`--gdn-config BVP=128`), one process a side, the new rule first (it compiles;
# the old side reuses inductor's cache: the tree call is an opaque op, so only its launch config differs).
#   device run (carry .whl):  source scripts/gpu/setup.sh; bash scripts/gpu/prep_round_ab.sh
OUT=${OUT:-/tmp/prep_round_out}
source scripts/gpu/common.sh
args=(--model qwen3.6-27b-shape --specs weaver:64 --drafter published --adapter paper --reps 20 --top 12)
for side in ${AB_SIDES:-new old}; do
  extra=()
  [ "$side" = old ] && extra=(--gdn-config BVP=128)
  timeout "${AB_ROUND_S:-280}" python3 scripts/gpu/round_profile.py "${args[@]}" "${extra[@]}" 2>&1 | filter \
    > "$OUT/round27b_$side.txt"
  echo "$side: $(grep -E '^(verify|ROUND)' "$OUT/round27b_$side.txt" | awk '{print $1, $(NF-4)}' | tr '\n' ' ')" \
    "prep $(grep -m1 gdn_tree_prep_kernel "$OUT/round27b_$side.txt" | awk '{print $3}') us" | tee -a "$OUT/summary.txt"
done
