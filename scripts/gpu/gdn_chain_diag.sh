#!/usr/bin/env bash
# H200, issue 3: the v9 chain path hit an illegal address on the T=256 chain (gdn_chain_check.sh, h200 v9a);
#   each variant in its own process (carry .whl: fla-core + flash-linear-attention 0.6.0).
#   device run:  bash scripts/gpu/gdn_chain_diag.sh      (results in $OUT)
OUT=${OUT:-/tmp/gdn_chain_diag}
source "$(dirname "$0")/common.sh"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PYTHONPATH
run() { timeout "${GD_EACH_S:-60}" python3 scripts/gpu/gdn_chain_variants.py "$@" 2>&1 | grep -E "err|fla|Error|error" \
  | cut -c1-200 | tee -a "$OUT/variants.txt"; }
run 256 '{"chain_path": "off"}' --fla
run 128 '{"chain_path": "on"}'
run 256 '{}'
run 256 '{"BV": 16}'
run 256 '{"num_warps": 8}'
run 192 '{}'
