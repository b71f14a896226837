#!/usr/bin/env bash
# One H200, one call (< 10 min), issue 19: (1) peak device memory while loading a ~9.7 GB random checkpoint in
# the released Qwen3.6 layout (the 27B text shape cut to 6 decoder layers, 15 shards, vision + MTP tensors to
# skip) written to local disk; (2) `weaver bench scale` at the Qwen3.6-27B text shape, random bf16 weights:
# copy bandwidth and the AR floor, the AR step, verify alone at N = 16..128 (chains and proposal trees),
# prefill at 1k / 4k tokens, rounds with their stages, projected speedups. Everything lands in $OUT.
#
#   device run (carry .whl):  bash scripts/gpu/scale.sh
#   env: SCALE_LOAD=0 / SCALE_BENCH=0 skip a step; SCALE_LOAD_LAYERS (6: ~9.7 GB); SCALE_METHODS
#        ("ar chain weaver ddtree"); SCALE_BUDGETS ("16 64"; each budget of ddtree / weaver compiles and captures
#        its round twice, the slow part); SCALE_ARGS (more `bench scale` arguments, e.g. --tau-from
#        benchmarks/results/acceptance/<run>/report.json); SCALE_TIMEOUT (s, 450): the bench writes its report
#        after every row, so a run cut short keeps what it measured. A CPU smoke run of the plumbing:
#        SCALE_DEVICE=cpu SCALE_MODEL=tiny-qwen3_5 SCALE_LOAD_LAYERS=4 SCALE_ARGS="--prefill 16 --context 16
#        --verify-nodes 4 --new-tokens 4 --adapter random:16" SCALE_BUDGETS=4 bash scripts/gpu/scale.sh
# The hybrid's verify is torch.compile'd now (as the engine runs it), once per verify-alone shape: with the
# default 8 shapes that adds 8 compiles at the 27B shape; `--verify-nodes 16 64` in SCALE_ARGS keeps 4.
# .whl/ holds fla-core and flash-linear-attention 0.6.0 (the GDN chunk kernel of the prefill), as kernels.sh.
OUT=${OUT:-/tmp/scale_out}
source scripts/gpu/common.sh
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || echo "fla wheels did not install; the prefill runs the torch chunk form"
fi
export PYTHONPATH=/tmp/site:$PYTHONPATH
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw,memory.total \
  --format=csv | tee "$OUT/nvidia_smi.txt"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" | tee -a "$OUT/nvidia_smi.txt"
python3 -c "import fla; print('fla', fla.__version__)" 2>/dev/null | tee -a "$OUT/nvidia_smi.txt" || true

if [ "${SCALE_LOAD:-1}" = "1" ]; then
  echo "### load: released layout, ${SCALE_LOAD_LAYERS:-6} layers of ${SCALE_MODEL:-qwen3.6-27b-shape}" | tee "$OUT/load.txt"
  timeout "${SCALE_LOAD_TIMEOUT:-150}" python3 -m weaver.cli bench load --model "${SCALE_MODEL:-qwen3.6-27b-shape}" \
    --num-layers "${SCALE_LOAD_LAYERS:-6}" --dir /tmp/released_ckpt --device "${SCALE_DEVICE:-cuda}" --dtype bf16 \
    --out "$OUT/load.json" 2>&1 | tee -a "$OUT/load.txt"
  echo "exit ${PIPESTATUS[0]} (1: peak over 1.1x the weights; 124: timed out)" | tee -a "$OUT/load.txt"
  rm -rf /tmp/released_ckpt
fi

if [ "${SCALE_BENCH:-1}" = "1" ]; then
  # shellcheck disable=SC2086
  timeout "${SCALE_TIMEOUT:-450}" python3 -m weaver.cli bench scale --model "${SCALE_MODEL:-qwen3.6-27b-shape}" \
    --device "${SCALE_DEVICE:-cuda}" --dtype bf16 --methods ${SCALE_METHODS:-ar chain weaver ddtree} --budgets ${SCALE_BUDGETS:-16 64} \
    --out "$OUT/scale" ${SCALE_ARGS:-} 2>&1 | filter | tee "$OUT/scale.txt"
  echo "exit ${PIPESTATUS[0]}" | tee -a "$OUT/scale.txt"
fi
