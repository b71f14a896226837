# H200, issue 16 (architecture clean-up; behaviour and speed must not change), in one call: the captured rounds'
# tokens against ar (tiny fp32 models, compiled stages), then `weaver bench rounds` at SmolLM2-135M shapes at the
# last commit before the issue (b257b77, carried as .baseline/src) and at this tree, one after the other in the
# same process environment, with every dynamo recompile-limit warning counted.
#   git archive b257b77 src | tar -x -C .baseline      # here, before the call; then carry .baseline
#   OUT=... bash scripts/gpu/refactor_ab.sh
OUT=${OUT:-/tmp/out}
source scripts/gpu/common.sh
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader | tee "$OUT/gpu.txt"
BENCH="--model smollm2-shape --random-weights --device cuda --drafter random:3 --adapter random:512 \
--methods ar chain ddtree weaver --budgets 16 32 64 128"
(timeout "${AB_CHECK_S:-100}" python3 scripts/gpu/rounds_check.py --quick 2>&1 | filter) | tee "$OUT/rounds_check.txt"
for side in ${AB_SIDES:-before after}; do
  src=$PWD/src
  [ "$side" = before ] && src=$PWD/.baseline/src
  echo "### $side ($src): weaver bench rounds $BENCH" | tee "$OUT/bench_$side.txt"
  PYTHONPATH=$src timeout "${AB_BENCH_S:-230}" python3 -m weaver.cli bench rounds $BENCH --out "$OUT/bench_$side.json" \
    > "$OUT/bench_$side.log" 2>&1
  echo "rc $?" >> "$OUT/bench_$side.txt"
  grep -E "^(ar|chain|ddtree|weaver) " "$OUT/bench_$side.log" | tee -a "$OUT/bench_$side.txt"
  echo "recompile_limit warnings: $(grep -c 'recompile_limit' "$OUT/bench_$side.log")" | tee -a "$OUT/bench_$side.txt"
done
