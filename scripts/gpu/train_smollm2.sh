#!/usr/bin/env bash
# H200, issue 17: regenerate, train the SmolLM2-135M drafter and Weaver adapter, measure acceptance; back-to-back
# calls on one warm machine (what lives between calls is in ~/cache and /tmp/work; what must be kept comes back
# through $OUT, at most 8 files of < 16 MiB and 64 MiB together).
#   call 1 (carry .gguf/smollm2.gguf.part.aa):                 bash scripts/gpu/train_smollm2.sh calibrate
#   call 2 (carry .gguf/smollm2.gguf.part.ab .whl .carry):     bash scripts/gpu/train_smollm2.sh drafter
#   call 3 (carry .carry):                                     bash scripts/gpu/train_smollm2.sh weaver
#   call 4 (carry .carry):                                     bash scripts/gpu/train_smollm2.sh bench
# or `all` in one call (carry the last GGUF part, .whl, .carry): regenerate, then `finish` from a fresh run;
# or, for a longer drafter run, `more` (the drafter only) in as many calls as fit, then `finish` in place of
# call 3: resume the drafter run for DRAFTER_S more seconds (the same DRAFTER_STEPS: one cosine schedule over all
# calls), then the adapter; the weights of both come back as weights.tar.* (< 15 MiB parts), the logs,
# histories and plots as logs.tar.
# calibrate: part 1 of the GGUF to ~/cache, and scripts/gpu/train_calibrate.py (regeneration tok/s, drafter
#   steps/s per batch x anchors at random weights), kept in ~/cache/calibrate.txt;
# drafter: `weaver data regenerate` (batched, CUDA-graphed decode) then `weaver train drafter` with the batch and
#   anchors of the calibration's best predictions/s and as many cosine steps as fit DRAFTER_S seconds;
# weaver: `weaver train weaver` on the same data, then a quick fp32 acceptance check;
# bench: `weaver bench acceptance` in fp32 (tau, per-depth acceptance, greedy equality with ar) and in bf16
#   (tok/s of every method and budget next to ar), the same prompts.
# Warm starts: DRAFTER_INIT / WEAVER_INIT (e.g. src/weaver/assets/smollm2-drafter) start a new run from trained
# weights (`--init-from`), so runs add up across sessions; `regen` regenerates the data only.
# WEAVER_RANK / WEAVER_HEADS / WEAVER_MLP set a new adapter's shape (a warm start keeps its own); DRAFTER_GROW
# (with DRAFTER_INIT) appends drafter layers that start as the identity (`--grow-to`). WEAVER_GREEDY adds that
# weight of the greedy-path CE to the adapter's loss (`--greedy-weight`, session 40). WEAVER_GROW_LAYERS /
# WEAVER_GROW_MLP (with WEAVER_INIT) give the adapter more blocks / a wider MLP that start with no effect
# (`--grow-layers`, `--grow-mlp`, session 41).
# Budgets (seconds) are variables so each call ends inside its 10 minutes.
OUT=${OUT:-/tmp/train_out}
stage=${1:?calibrate, regen, drafter, more, finish, all, weaver or bench}
W=/tmp/work
mkdir -p $W ~/cache "$OUT"
if [ "$stage" = calibrate ]; then
  cp .gguf/smollm2.gguf.part.aa ~/cache/
  export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
  nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader | tee "$OUT/gpu.txt"
  timeout ${CALIB_S:-240} python3 scripts/gpu/train_calibrate.py --quick 2>&1 | grep -v "train drafter" \
    | tee "$OUT/calibrate.txt" ~/cache/calibrate.txt
  exit 0
fi
source scripts/gpu/setup.sh
source scripts/gpu/common.sh
weaver() { python3 -m weaver.cli "$@"; }
log() { tr '\r' '\n' | grep -v "^$" | awk -v every="$1" 'NR % every == 0 || /step|error|Error|{|Traceback/'; }
regenerate() {
  weaver models pull smollm2 2>&1 | tail -1
  timeout ${REGEN_TIMEOUT:-240} python3 -m weaver.cli data regenerate --prompts .carry/train_prompts.jsonl.gz \
    --out $W/regen --batch-size ${REGEN_BATCH:-512} --max-new-tokens ${REGEN_NEW:-320} \
    --shard-size ${REGEN_SHARD:-4096} --sampled-fraction ${REGEN_SAMPLED:-0.25} --max-seconds ${REGEN_S:-150} \
    2>&1 | log 50 | tee $OUT/regen_log.txt
  cp $W/regen/regenerate.json $OUT/ 2>/dev/null
}
if [ "$stage" = regen ]; then regenerate; exit 0; fi  # the data only (the call that carries the last GGUF part)
if [ "$stage" = all ]; then regenerate; stage=finish; fi  # one call: regenerate, a new drafter run, the adapter
resume_drafter() {  # continue (or start) the drafter run in $W/drafter: one cosine schedule of DRAFTER_STEPS
  timeout ${DRAFTER_TIMEOUT:-420} python3 -m weaver.cli train drafter --data $W/regen --out $W/drafter \
    --steps ${DRAFTER_STEPS:?the total of the run} --max-seconds ${DRAFTER_S:-330} --lr ${DRAFTER_LR:-1e-3} \
    --warmup-steps 60 --layers ${DRAFTER_LAYERS:-4} --anchors ${DRAFTER_ANCHORS:-64} \
    --batch-size ${DRAFTER_BATCH:-16} ${DRAFTER_INIT:+--init-from $DRAFTER_INIT} ${DRAFTER_GROW:+--grow-to $DRAFTER_GROW} --log-every 25 2>&1 | log 20 | tee -a $OUT/${1:-drafter_log2.txt}
}
train_adapter() {
  timeout ${WEAVER_TIMEOUT:-330} python3 -m weaver.cli train weaver --data $W/regen --drafter $W/drafter/final \
    --out $W/weaver --steps ${WEAVER_STEPS:-2400} --max-seconds ${WEAVER_S:-240} --lr ${WEAVER_LR:-1e-3} \
    --warmup-steps 60 --anchors ${WEAVER_ANCHORS:-16} --batch-size ${WEAVER_BATCH:-32} --loss ${WEAVER_LOSS:-kl} \
    --greedy-weight ${WEAVER_GREEDY:-0} --d-rank ${WEAVER_RANK:-512} --heads ${WEAVER_HEADS:-8} --mlp-dim ${WEAVER_MLP:-1024} ${WEAVER_INIT:+--init-from $WEAVER_INIT} ${WEAVER_GROW_LAYERS:+--grow-layers $WEAVER_GROW_LAYERS} ${WEAVER_GROW_MLP:+--grow-mlp $WEAVER_GROW_MLP} --log-every 25 2>&1 | log 20 | tee $OUT/weaver_log.txt
}
case $stage in
more)  # the drafter run only, for DRAFTER_S more seconds; its final weights back as drafter_final.tar.*
  resume_drafter
  cp $W/drafter/history.jsonl $OUT/drafter_history.jsonl; cp $W/drafter/plot.png $OUT/drafter_plot.png
  tar -C $W -cf - drafter/final | split -b 15M - $OUT/drafter_final.tar.
  ;;
drafter)
  regenerate
  # the calibration's best predictions/s (lines "drafter B b N n L l: s steps/s, p pred/s, ...")
  read -r B N S < <(grep -E "^drafter B .* pred/s" ~/cache/calibrate.txt | grep -v "out of memory" \
    | sed -E 's/drafter B ([0-9]+) N ([0-9]+) L [0-9]+: ([0-9.]+) steps\/s, ([0-9,]+) pred.*/\4 \1 \2 \3/' \
    | tr -d ',' | sort -n | tail -1 | cut -d' ' -f2-)
  B=${DRAFTER_BATCH:-${B:-32}}; N=${DRAFTER_ANCHORS:-${N:-128}}
  STEPS=${DRAFTER_STEPS:-$(python3 -c "print(int(${S:-3} * ${DRAFTER_S:-330} * 0.92))")}
  echo "drafter: batch $B anchors $N steps $STEPS (calibrated ${S:-?} steps/s)" | tee $OUT/drafter_log.txt
  DRAFTER_BATCH=$B DRAFTER_ANCHORS=$N DRAFTER_STEPS=$STEPS resume_drafter drafter_log.txt
  cp $W/drafter/history.jsonl $W/drafter/plot.png $OUT/ 2>/dev/null  # regenerate.json: regenerate() copied it
  # the drafter's weights (shards < 15 MiB) and a slice of the data, should the machine go cold before call 3
  tar -C $W -cf - drafter/final regen/shard_00000.npz | split -b 15M - $OUT/drafter_bundle.tar.
  ls -la $OUT
  ;;
finish)
  if [ "${DRAFTER_S:-330}" != 0 ]; then resume_drafter  # DRAFTER_S=0: the drafter run is done, the adapter only
  elif [ ! -d $W/drafter/final ]; then  # ... on a fresh machine: the adapter trains against DRAFTER_INIT's weights
    mkdir -p $W/drafter && cp -r ${DRAFTER_INIT:?DRAFTER_S=0 on a fresh machine needs DRAFTER_INIT} $W/drafter/final
  fi
  train_adapter
  mkdir -p $W/logs && cp $OUT/*.txt $W/logs/
  for run in drafter weaver; do  # (no drafter run in an adapter-only call)
    cp $W/$run/history.jsonl $W/logs/${run}_history.jsonl 2>/dev/null; cp $W/$run/plot.png $W/logs/${run}_plot.png 2>/dev/null
  done
  tar -C $W -cf $OUT/logs.tar logs
  tar -C $W -cf - drafter/final weaver/final | split -b 15M - $OUT/weights.tar.
  mkdir -p ~/cache/runs/drafter ~/cache/runs/weaver && cp -r $W/drafter/final ~/cache/runs/drafter/ \
    && cp -r $W/weaver/final ~/cache/runs/weaver/
  ls -la $OUT
  ;;
weaver)
  train_adapter
  cp $W/weaver/history.jsonl $OUT/weaver_history.jsonl; cp $W/weaver/plot.png $OUT/weaver_plot.png
  tar -C $W -cf $OUT/weaver_final.tar weaver/final
  timeout ${QUICK_S:-200} python3 -m weaver.cli bench acceptance --eval-dir .carry/eval --drafter $W/drafter/final \
    --adapter $W/weaver/final --dtype fp32 --limit ${QUICK_LIMIT:-4} --budgets 16 64 --sampled-budget 0 \
    --out $OUT/quick 2>&1 | grep -v "acceptance:" | tail -25
  ;;
bench)
  for dtype in fp32 bf16; do
    sampled=$([ $dtype = fp32 ] && echo 64 || echo 0)
    timeout ${BENCH_S:-250} python3 -m weaver.cli bench acceptance --eval-dir .carry/eval --drafter $W/drafter/final \
      --adapter $W/weaver/final --dtype $dtype --limit ${BENCH_LIMIT:-10} --sampled-budget $sampled \
      --out $OUT/acceptance_$dtype 2>&1 | grep -v "acceptance:" | tee $OUT/acceptance_$dtype.log | tail -22
  done
  ;;
esac
