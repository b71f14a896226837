#!/usr/bin/env bash
# H200, issue 4 (chain round 1.56x an AR step in h200_v17, target 1.5x): programmatic dependent launch for the
#   row GEMMs (WEAVER_PDL): each GEMM may start while the previous kernel ends, prefetch its weight rows into L2,
#   and wait (griddepcontrol.wait) before it reads anything the previous kernels wrote. h200_v18 ran it (verify
#   stage graph 0.81 -> 0.73 ms, one-graph round unchanged); since then `_round` converts with the hardware's
#   round-to-nearest-even when compiled (fewer integer instructions in every GEMM's K loop). h200_v19 ran that
#   (chain round 0.819 ms = 1.29x an AR step without PDL); since then the AR step's own launches (the decode
#   GEMV, the decode attention) take PDL too, so WEAVER_PDL=1 speeds the baseline as much as the rounds
#   (h200_v20: chain 1.34x, weaver 64 3.04x); since then every other Triton kernel of the rounds launches with
#   PDL as well (a bare wait at its start: nothing is read before it). One call:
#   1. compiled tests at full size of every kernel with PDL, the fast verify, decode and draft (PDL on);
#   2. rounds_check.py --quick (captured one-graph rounds with PDL equal the ar tokens);
#   3. round_profile.py ar + chain 16 + weaver 64 with WEAVER_PDL=0 (before), then WEAVER_PDL=1 (after).
#   device run:  bash scripts/gpu/pdl_check.sh      (results in $OUT)
OUT=${OUT:-/tmp/pdl_out}
source "$(dirname "$0")/common.sh"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader | tee "$OUT/tests_gpu.txt"
(timeout "${PD_TEST_S:-200}" python3 -m pytest --triton-full -q -p no:cacheprovider -x -rf \
  tests/kernels/test_tree_attention.py tests/kernels/test_decode.py tests/kernels/test_pool_top.py \
  tests/kernels/test_node_attention.py tests/kernels/test_weaver_frontier.py tests/kernels/test_vocab_top1.py \
  tests/kernels/test_topk.py tests/kernels/test_structure.py tests/models/test_fast_verify.py \
  tests/models/test_fast_decode.py tests/spec/test_fast_drafter.py 2>&1 | tail -4) | tee -a "$OUT/tests_gpu.txt"
timeout "${PD_CHECK_S:-80}" python3 scripts/gpu/rounds_check.py --quick 2>&1 | filter | tee "$OUT/rounds_check.txt" | tail -4
profile before WEAVER_PDL=0
profile after WEAVER_PDL=1
