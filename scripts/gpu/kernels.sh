#!/usr/bin/env bash
# GDN tree kernels on a GPU machine, in one call: install the carried fla wheels, run `weaver bench kernels`,
# then the Triton kernel tests at full size (pytest --triton-full); everything lands in $OUT.
#
#   device run (carry .whl):  bash scripts/gpu/kernels.sh [extra bench args...]
#   env: KERNELS_BENCH=0 / KERNELS_TESTS=0 skip a step, KERNELS_TEST_K="expr" selects some (pytest -k);
#        KERNELS_BENCH_ARGS overrides the default bench arguments; *_TIMEOUT bound each step (s);
#        KERNELS_TAG suffixes the log names (several invocations in one call).
# .whl/ holds fla-core and flash-linear-attention 0.6.0 (py3-none-any), downloaded with pip download.
set -uo pipefail
OUT=${OUT:-/tmp/kernels_out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || echo "fla wheels did not install; baselines will be skipped"
fi
export PYTHONPATH=/tmp/site:$PWD/src${PYTHONPATH:+:$PYTHONPATH}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw,utilization.gpu \
  --format=csv | tee "$OUT/nvidia_smi.txt"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" | tee -a "$OUT/nvidia_smi.txt"

if [ "${KERNELS_BENCH:-1}" = "1" ]; then
  ARGS=${KERNELS_BENCH_ARGS:---kinds tree chain wide --sweep --fp32-check}
  # shellcheck disable=SC2086
  timeout "${KERNELS_BENCH_TIMEOUT:-420}" python3 -m weaver.bench.kernels $ARGS --out "$OUT" "$@" 2>&1 \
    | tee "$OUT/bench_stdout${KERNELS_TAG:+_$KERNELS_TAG}.txt"
fi

if [ "${KERNELS_TESTS:-1}" = "1" ]; then
  timeout "${KERNELS_TEST_TIMEOUT:-300}" python3 -m pytest --triton-full -q -x -p no:cacheprovider \
    tests/kernels/test_structure.py tests/kernels/test_conv.py tests/kernels/test_gdn.py \
    ${KERNELS_TEST_K:+-k "$KERNELS_TEST_K"} --durations=10 2>&1 | tee "$OUT/gpu_tests${KERNELS_TAG:+_$KERNELS_TAG}.log"
fi
