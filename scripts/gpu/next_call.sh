#!/usr/bin/env bash
# The next device call, whichever card comes (sessions 55-60 got two machines in ~62 calls, so each call must be
# worth its start): on an H200, issue 19's owed figures (`owed_27b.sh`: the AR step on BLAS / gemv_tma / the Triton
# GEMV, the one-row GEMV sweep, the rounds); on an H100 (whose TMA A/B session 60 ran: scale/h100_session60), the
# 27B AR step on the defaults (auto: gemv_tma there since session 60), then the rounds for ar, chain 16 and weaver
# 64. Then (NEXT_PART=2, the next call on the warm machine) on an H200 the draft with a 32k token map and the 27B
# rounds' greedy tokens against ar's, and on either card greedy = ar on CUDA (tiny fp32 models) in the time left.
# Every file lands under $OUT.
#   here:    bash scripts/gpu/travel.sh results     (then `full` once the call is back; commit named paths only)
#   device:  source scripts/gpu/setup.sh; bash scripts/gpu/next_call.sh      (carry .whl)
#   then, on the warm machine: source scripts/gpu/setup.sh; NEXT_PART=2 bash scripts/gpu/next_call.sh
#   on a budget too low for a whole call (~330 s): NEXT_PART=short (the AR step on the defaults, and on an H200
#   with --gemv tma too: ~200 s)
OUT=${OUT:-/tmp/next_out}
source scripts/gpu/common.sh
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader | tee "$OUT/gpu.txt"
part=${NEXT_PART:-1}
card=H100; grep -q H200 "$OUT/gpu.txt" && card=H200
if [ "$part" = short ]; then
  scale ar_auto 130 --methods ar
  [ "$card" = H200 ] && scale ar_tma 130 --methods ar --gemv tma
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
  # issue 19's 27B lossless point: greedy tokens of the captured rounds against ar, bf16 (session 32's last run:
  # matching prefixes 1-2 of 64 from near-flat random logits, 64 of 64 in fp32: scale/h200_session32)
  timeout 200 python3 -c "
import sys; sys.path.insert(0, 'scripts/gpu')
import round_profile as rp, weaver, torch
from weaver.bench.scale import attach_named
llm = attach_named(weaver.LLM.from_config('qwen3.6-27b-shape', random_weights=True, seed=0, device='cuda',
                                          dtype='bf16'), 'published', 'paper')
print(torch.cuda.get_device_name(), torch.__version__, flush=True)
rp.equal_tokens(llm, ['chain:16', 'weaver:64', 'ddtree:64'], 64)
" 2>&1 | filter > "$OUT/equal_tokens_27b.txt"
  grep "matching prefix" "$OUT/equal_tokens_27b.txt"
elif [ "$part" = 1 ]; then
  # an H100: the AR step on the defaults (its log names the route: gemv_tma), then the rounds
  scale ar_auto 170 --methods ar
  scale scale $((560 - SECONDS)) --methods ar chain weaver --budgets 64
  exit 0
fi
left=$((560 - SECONDS))
if [ "$left" -gt 60 ]; then
  timeout "$left" python3 -m pytest --triton-full -q -rf --tb=short -p no:cacheprovider -n 8 \
    tests/speculative/test_engine_lossless.py -k cuda > "$OUT/lossless_gpu.txt" 2>&1
  tail -n 3 "$OUT/lossless_gpu.txt"
fi
