#!/usr/bin/env bash
# H200, issue 3 (T=256 chains: 102 us of kernel against fla chunk's 47 us in v8): the chunked chain path (v9),
#   one call (carry .whl: fla-core + flash-linear-attention 0.6.0):
#   1. gdn_probe.py: the default configs (T=256 chains now take the chain path) against float64;
#   2. `weaver bench kernels` at T = 128 and 256, trees and chains: fused end to end, kernel, structure, prep,
#      per-branch, varlen and fla chunk on the chain; the sweep's chain_path="off" row (the dense solve) at 256.
#   device run:  bash scripts/gpu/gdn_chain_check.sh      (results in $OUT)
OUT=${OUT:-/tmp/gdn_chain_out}
source "$(dirname "$0")/common.sh"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PYTHONPATH
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$OUT/nvidia_smi.txt"
timeout "${GC_PROBE_S:-100}" python3 scripts/gpu/gdn_probe.py 2>&1 | tee "$OUT/probe.txt" | tail -14
timeout "${GC_BENCH_S:-330}" python3 -m weaver.bench.kernels --T ${GC_T:-128 256} --kinds tree chain \
  --methods fused fused_kernel structure prep per_branch varlen chunk_chain --sweep --sweep-T 256 --sweep-from 15 \
  --reps 100 --sets 8 --out "$OUT" 2>&1 | tee "$OUT/bench_stdout.txt" | grep -v "^row" | cut -c1-300 | tail -40
