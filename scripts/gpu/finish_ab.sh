#!/usr/bin/env bash
# Device call (session 44, issue 19): the adapter finish's GEMVs with all node rows a program (`block_m`) against
# one row a program and cuBLAS, alone and swept (adapter_build_ab.py), then SmolLM2-shape rounds with the code before
# the change (.baseline/src, carried: `git archive <rev> src ':!src/weaver/assets' | tar -x -C .baseline`) and
# after, alternating, so the decode GEMV's generalisation (one row: the same launch as before) is timed too.
#   bash scripts/gpu/finish_ab.sh    # writes $OUT/{gpu.txt,adapter_build_ab.txt,rounds.txt,rounds_json.tgz}
source scripts/gpu/setup.sh > "$OUT/gpu.txt" 2>&1
timeout "${AB_TIMEOUT:-300}" python3 scripts/gpu/adapter_build_ab.py --sweep 2048 512 > "$OUT/adapter_build_ab.txt" 2>&1
R="python3 -m weaver.cli bench rounds --model smollm2-shape --random-weights --device cuda --dtype bf16
   --drafter random:6 --adapter random:512 --methods ar chain weaver --budgets 16 64"
mkdir -p /tmp/rounds
for side in base now baseb nowb; do
  case $side in base*) P=/tmp/site:$PWD/.baseline/src;; *) P=/tmp/site:$PWD/src;; esac
  echo "## $side (PYTHONPATH=$P)" >> "$OUT/rounds.txt"
  PYTHONPATH=$P timeout 120 $R --out /tmp/rounds/rounds_$side.json > /tmp/rounds/rounds_$side.log 2>&1
  cat /tmp/rounds/rounds_$side.md >> "$OUT/rounds.txt" 2>&1 || tail -20 /tmp/rounds/rounds_$side.log >> "$OUT/rounds.txt"
done
tar -czf "$OUT/rounds_json.tgz" -C /tmp/rounds .
