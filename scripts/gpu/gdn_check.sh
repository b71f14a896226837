#!/usr/bin/env bash
# H200, one call (~4 min; carry .whl and the baseline kernel module): the GDN commit fold and the tree kernels at
# the round sizes of the Qwen3.6-27B shape (issue 19), each step bounded (GC_AB, GC_TESTS, GC_SWEEP seconds):
#   1. scripts/gpu/gdn_commit_ab.py: the commit kernel against the carried baseline (GC_BASELINE);
#   2. the commit tests compiled at the 27B GDN shape (--triton-full): stacked and per-layer against the torch
#      references, long paths within and past one path chunk, in place under torch.compile;
#   3. `weaver bench kernels --sweep` at T = GC_T (65: a budget-64 verify, whose 65 nodes need two 64-row tiles,
#      so the kernels' sweeps at T = 64 do not tell), tree and chain, the GDN tree kernel alone.
#   here:   git show <rev>:src/weaver/kernels/triton/gdn_commit.py > .carry/gdn_commit_before.py
#   device: source scripts/gpu/setup.sh && OUT=$OUT bash scripts/gpu/gdn_check.sh
OUT=${OUT:-/tmp/gdn_check}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader | tee "$OUT/gpu.txt"
timeout "${GC_AB:-60}" python3 scripts/gpu/gdn_commit_ab.py --baseline "${GC_BASELINE:-.carry/gdn_commit_before.py}" \
  2>&1 | grep -v "Warning\|warn" | tee "$OUT/commit_ab.txt"
timeout "${GC_TESTS:-100}" python3 -m pytest -q -p no:cacheprovider --triton-full tests/kernels/test_stacked_commit.py \
  tests/kernels/test_gdn.py -k commit 2>&1 | grep "passed\|failed\|FAILED\|rror" | tail -8 | tee "$OUT/tests.txt"
timeout "${GC_SWEEP:-150}" python3 -m weaver.cli bench kernels --T ${GC_T:-65} --kinds tree chain --methods fused_kernel \
  --sweep --reps 60 --out "$OUT/kernels" 2>&1 | grep -v "Warning\|warn" | tail -60 > "$OUT/sweep.txt"
tail -40 "$OUT/sweep.txt"
