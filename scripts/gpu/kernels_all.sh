#!/usr/bin/env bash
# Issue 3 on an H200 in one device call (carry .whl: fla-core + flash-linear-attention 0.6.0):
#   0. probe: the default configs vs float64, with and without an initial state (a crash or a gross
#      error falls back to 32-row tiles for the rest of the call);
#   1. the Triton GDN tests compiled at full size (correctness first);
#   2. `weaver bench kernels` at T = 16..256, proposal trees and chains, every baseline;
#   3. the fp32-input check (errors and kernel time) at T = 16..256;
#   4. the launch-config sweep at T=128 (KA_SWEEP_T="128 256": more sizes; kernel only; cut at KA_SWEEP),
#   5. the anchor-like wide trees at T=128.
# Each step is bounded (seconds: KA_TEST, KA_BENCH, KA_FP32, KA_SWEEP, KA_WIDE) so the call ends inside
# 10 minutes. Everything lands in $OUT/kernels_all.tgz (the device returns at most 8 files) and the
# markdown tables are printed last.
#   device run:  bash scripts/gpu/kernels_all.sh
set -uo pipefail
FINAL=${OUT:-/tmp/kernels_out}
export OUT=/tmp/kernels_all
rm -rf "$OUT" && mkdir -p "$OUT" "$FINAL"
K="table or launch or unset or graph or default"
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH}
if ls .whl/*.whl >/dev/null 2>&1; then  # kernels.sh installs them too; the probes need them first
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site:$PYTHONPATH
fi
timeout 120 python3 scripts/gpu/gdn_probe.py 2>&1 | tee "$OUT/probe.txt"
KERNELS_BENCH=0 KERNELS_TEST_TIMEOUT=${KA_TEST:-110} KERNELS_TEST_K=$K bash scripts/gpu/kernels.sh
KERNELS_TESTS=0 KERNELS_BENCH_TIMEOUT=${KA_BENCH:-190} \
  KERNELS_BENCH_ARGS="--T 16 32 64 128 256 --kinds tree chain --reps 100 --sets 8" bash scripts/gpu/kernels.sh
KERNELS_TESTS=0 KERNELS_TAG=fp32 KERNELS_BENCH_TIMEOUT=${KA_FP32:-45} \
  KERNELS_BENCH_ARGS="--T 16 64 128 256 --kinds tree chain --methods fused --fp32-check --reps 60 --sets 4 --tag fp32" \
  bash scripts/gpu/kernels.sh
KERNELS_TESTS=0 KERNELS_TAG=sweep KERNELS_BENCH_TIMEOUT=${KA_SWEEP:-60} \
  KERNELS_BENCH_ARGS="--T ${KA_SWEEP_T:-128} --kinds tree chain --methods fused_kernel --sweep --reps 60 --sets 4 --tag sweep" \
  bash scripts/gpu/kernels.sh
KERNELS_TESTS=0 KERNELS_TAG=wide KERNELS_BENCH_TIMEOUT=${KA_WIDE:-30} \
  KERNELS_BENCH_ARGS="--T 128 --kinds wide --methods fused fused_kernel per_branch varlen --reps 100 --sets 8 --tag wide" \
  bash scripts/gpu/kernels.sh
tar czf "$FINAL/kernels_all.tgz" -C "$OUT" .
ls -la "$OUT"
for f in "$OUT"/kernels_h200_bf16.md "$OUT"/kernels_h200_bf16_sweep.md; do [ -f "$f" ] && sed -n '/^| T/,$p' "$f"; done
