#!/usr/bin/env bash
# H200, issue 4: h200_v22 (PDL for every kernel of the rounds) left the weaver 64 round at 3.04x the AR step,
#   its build stage faster (0.706 -> 0.663 ms against h200_v20) but its verify stage slower (0.960 -> 1.036 ms).
#   A/B in one call: round_profile.py ar + chain 16 + weaver 64 with PDL everywhere ("all"), then with the weaver
#   verify's separate RoPE/K-V write and attention kernels launched plainly (WEAVER_PDL_OFF, "noattn").
#   device run:  bash scripts/gpu/pdl_ab.sh      (results in $OUT)
OUT=${OUT:-/tmp/pdl_ab_out}
source "$(dirname "$0")/common.sh"
profile all WEAVER_PDL_OFF=
profile noattn WEAVER_PDL_OFF=tree_attention,tree_rope_kv
