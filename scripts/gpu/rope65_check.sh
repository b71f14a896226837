#!/usr/bin/env bash
# H200, issue 4: the weaver 64 verify ropes its 65 nodes' K and writes K/V in a launch of its own
#   (tree_rope_kv_write, then tree_attention: 60 launches a verify). Alone, the one-launch form
#   (tree_attention_rope) is 1.1 us slower at 65 nodes (h200_v15); in the round it saves 30 launches. One call:
#   1. rounds_check.py --quick with the one-launch form up to 65 nodes (equal to the ar tokens);
#   2. round_profile.py ar + chain 16 + weaver 64 with the default (two launches past 32 nodes) and with
#      WEAVER_ROPE_ATTENTION_MAX_NODES=65, one process each; the builder's fusions on in both.
#   device run:  bash scripts/gpu/rope65_check.sh      (results in $OUT)
OUT=${OUT:-/tmp/rope65_out}
source "$(dirname "$0")/common.sh"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader | tee "$OUT/rounds_check.txt"
WEAVER_ROPE_ATTENTION_MAX_NODES=65 timeout "${PC_CHECK_S:-80}" python3 scripts/gpu/rounds_check.py --quick 2>&1 \
  | filter | tee -a "$OUT/rounds_check.txt" | tail -4
profile default
profile rope65 WEAVER_ROPE_ATTENTION_MAX_NODES=65
