#!/usr/bin/env bash
# The next device call, whichever card comes (sessions 55-59 got one machine in ~56 calls, so each call must be
# worth its start): on an H200, issue 19's owed figures (`owed_27b.sh`: the AR step on BLAS / the Triton GEMV /
# gemv_tma, the one-row GEMV sweep, the rounds); on an H100, gemv_tma's compiled tests and the 27B AR step on
# --gemv triton against --gemv tma; then (NEXT_PART=2, the next call on the warm H100) the GDN prep prefetch A/B
# owed since session 56 (`prefetch_ab.sh`) and, in the time left, greedy = ar through captured rounds on CUDA
# (fp32 tiny llama / hybrid, the oracle drafter: issue 19's GPU equality point). Every file lands under $OUT.
#   here:    bash scripts/gpu/travel.sh results     (then `full` once the call is back; commit named paths only)
#   device:  source scripts/gpu/setup.sh; bash scripts/gpu/next_call.sh      (carry .whl)
#   then, on the warm machine: source scripts/gpu/setup.sh; NEXT_PART=2 bash scripts/gpu/next_call.sh
#   (an H200: the draft with a 32k token map; an H100: the prefetch A/B; then greedy = ar on CUDA, either card)
#   on a budget too low for a whole call: NEXT_PART=short (gemv_tma's tests and tilings against cuBLAS, ~210 s)
OUT=${OUT:-/tmp/next_out}
source scripts/gpu/common.sh
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader | tee "$OUT/gpu.txt"
part=${NEXT_PART:-1}
card=H100; grep -q H200 "$OUT/gpu.txt" && card=H200
if [ "$part" = short ]; then
  # a call on a budget too low for either branch (~330 s: a start and ~200 s of command): gemv_tma's compiled tests,
  # then its tilings against cuBLAS at the three largest one-row shapes (~70% of the AR step's bytes)
  tma_tests 60
  timeout 150 python3 scripts/gpu/gemv_wide_ab.py --kinds tma --shapes mlp.gate_up mlp.down gdn.in_proj_qkvz 2>&1 \
    | filter > "$OUT/gemv_tma_short.txt"
  grep -E "best/cuBLAS" "$OUT/gemv_tma_short.txt" | cut -c1-300
  exit 0
fi
if [ "$card" = H200 ] && [ "$part" = 1 ]; then
  OUT=$OUT bash scripts/gpu/owed_27b.sh
  exit 0
fi
if [ "$card" = H200 ]; then
  # part 2 on a warm H200: the draft with a 32k token map (issue 19's draft <= 1.7 ms was missed at 1.72-1.75 with
  # the whole head), then greedy = ar on CUDA below
  scale draft_map 250 --methods chain weaver --budgets 64 --draft-vocab first:32768
elif [ "$part" = 1 ] && tma_tests 90; then
  # an H100, part 1: the TMA A/B on this card too (gemv="auto" takes the Triton GEMV on an H100): its compiled
  # tests, then the AR step at 27B on --gemv triton and --gemv tma, one process a side
  scale ar_triton 170 --methods ar --gemv triton
  scale ar_tma 170 --methods ar --gemv tma
  exit 0
else
  # an H100, part 2 (NEXT_PART=2, the next call on the warm machine; at once if the TMA tests failed): the GDN prep
  # prefetch A/B, then greedy = ar on CUDA below
  OUT=$OUT bash scripts/gpu/prefetch_ab.sh
fi
left=$((560 - SECONDS))
if [ "$left" -gt 60 ]; then
  timeout "$left" python3 -m pytest --triton-full -q -rf --tb=short -p no:cacheprovider -n 8 \
    tests/speculative/test_engine_lossless.py -k cuda > "$OUT/lossless_gpu.txt" 2>&1
  tail -n 3 "$OUT/lossless_gpu.txt"
fi
