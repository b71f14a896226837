#!/usr/bin/env bash
# H200, issue 17: train the SmolLM2-135M drafter and Weaver adapter, in back-to-back calls on one warm machine
# (everything between the calls lives in /tmp/work; what must be kept comes back through $OUT).
#   call 1 (carry .gguf/smollm2.gguf.part.aa):  mkdir -p ~/cache && cp .gguf/smollm2.gguf.part.aa ~/cache/
#   call 2 (carry .gguf/smollm2.gguf.part.ab .whl .carry):  source scripts/gpu/setup.sh && bash scripts/gpu/train_smollm2.sh drafter
#   call 3:  source scripts/gpu/setup.sh && bash scripts/gpu/train_smollm2.sh weaver
#   call 4:  source scripts/gpu/setup.sh && bash scripts/gpu/train_smollm2.sh bench
# A call that finds the machine cold has lost /tmp/work: carry regen.tar and the runs back (untar into
# /tmp/work) before the next stage. Budgets (seconds) are variables so a call ends inside its 10 minutes: REGEN_S, DRAFTER_S, WEAVER_S, BENCH_LIMIT.
OUT=${OUT:-/tmp/train_out}
source scripts/gpu/common.sh
W=/tmp/work
mkdir -p $W
stage=${1:?drafter, weaver or bench}
weaver() { python3 -m weaver.cli "$@"; }
# pack RUN: the run's weight files come back one by one (each < 16 MiB), the rest in one small tar
pack() {
  cp $W/$1/final/*.safetensors $OUT/ 2>/dev/null
  (cd $W/$1 && tar --exclude='*.safetensors' --exclude='state.pt' -cf $OUT/${1}_run.tar final history.jsonl plot.png \
    train_config.json 2>/dev/null; true)
}
case $stage in
drafter)
  weaver models pull smollm2 2>&1 | tail -1
  timeout 400 python3 -m weaver.cli data regenerate --prompts .carry/train_prompts.jsonl.gz --out $W/regen \
    --batch-size ${REGEN_BATCH:-512} --max-new-tokens ${REGEN_NEW:-384} --shard-size ${REGEN_SHARD:-8000} \
    --max-seconds ${REGEN_S:-150} 2>&1 | tr '\r' '\n' | grep -v "^$" | awk 'NR % 20 == 0 || /prompts/' \
    | tee $OUT/regen_log.txt
  timeout ${DRAFTER_TIMEOUT:-420} python3 -m weaver.cli train drafter --data $W/regen --out $W/drafter \
    --steps ${DRAFTER_STEPS:-4000} --max-seconds ${DRAFTER_S:-300} --lr ${DRAFTER_LR:-6e-4} --warmup-steps 100 \
    --layers ${DRAFTER_LAYERS:-3} --anchors ${DRAFTER_ANCHORS:-64} --batch-size ${DRAFTER_BATCH:-16} \
    --log-every 50 2>&1 | tr '\r' '\n' | awk 'NR % 25 == 0 || /step|error|Error|{/' | tee $OUT/drafter_log.txt
  cp $W/regen/regenerate.json $OUT/
  tar -C $W -cf $OUT/regen.tar regen  # small (~1.4 MB per 3,000 replies): keep it, a cold machine loses /tmp
  pack drafter
  ;;
weaver)
  timeout ${WEAVER_TIMEOUT:-400} python3 -m weaver.cli train weaver --data $W/regen --drafter $W/drafter/final \
    --out $W/weaver --steps ${WEAVER_STEPS:-4000} --max-seconds ${WEAVER_S:-270} --lr ${WEAVER_LR:-1e-3} \
    --warmup-steps 100 --anchors ${WEAVER_ANCHORS:-16} --batch-size ${WEAVER_BATCH:-32} --loss ${WEAVER_LOSS:-kl} --variant ${WEAVER_VARIANT:-released} \
    --log-every 50 2>&1 | tr '\r' '\n' | awk 'NR % 25 == 0 || /step|error|Error|{/' | tee $OUT/weaver_log.txt
  pack weaver
  timeout ${QUICK_S:-150} python3 -m weaver.cli bench acceptance --eval-dir .carry/eval --drafter $W/drafter/final --adapter $W/weaver/final \
    --limit ${QUICK_LIMIT:-3} --budgets 64 --sampled-budget 0 --out $OUT/quick 2>&1 | grep -v "acceptance:" | tail -30
  ;;
bench)
  timeout ${BENCH_S:-420} python3 -m weaver.cli bench acceptance --eval-dir .carry/eval --drafter $W/drafter/final --adapter $W/weaver/final \
    --limit ${BENCH_LIMIT:-20} --out $OUT/acceptance 2>&1 | grep -v "acceptance:" | tail -40
  ;;
esac
