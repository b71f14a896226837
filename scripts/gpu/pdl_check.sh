#!/usr/bin/env bash
# Session 49 put inductor's kernels under RuntimeOptions.pdl (`compile_stages` passes torch.compile
# options={"triton.enable_pdl": pdl}); it was measured on the 27B AR step only (H100: -0.18 to -0.21 ms, the same 32
# tokens). One device call (~560 s of command on a fresh machine), most needed first, each step bounded so a cut
# call still returns what ran (session 50 ran it on an H100: benchmarks/results/scale/h100_session50, call 2):
#   1. tests.txt: the GPU lossless suite with it on: test_engine_lossless's CUDA cases (captured and compiled rounds
#      of tiny llama and tiny qwen3_5, chain / ddtree / weaver: greedy output = ar), test_compiled_verify, and the
#      compiled test_gdn_decode (its tiny-hybrid decode test mended in session 49, never yet run on a GPU);
#   2. profile_135m.txt against profile_135m_no_inductor_pdl.txt: the launch-bound regime (smollm2-shape, ar /
#      chain:16 / weaver:64), inductor's PDL on against off with weaver's on in both: it must not lose there;
#   3. profile_27b.txt, the 27B rounds (ar / chain:16 / weaver:64) with 64 greedy tokens against ar: issue 19's
#      figures on an H200; on an H100 the rounds' first profile with inductor's PDL (session 49 timed the AR step).
#   device run:  source scripts/gpu/setup.sh; bash scripts/gpu/pdl_check.sh     (carry .whl)
OUT=${OUT:-/tmp/pdl_out}
source scripts/gpu/common.sh
nvidia-smi --query-gpu=name --format=csv,noheader | tee "$OUT/tests.txt"
timeout "${PDL_TESTS:-170}" python3 -m pytest --triton-full -v -rf --tb=short -p no:cacheprovider -n 16 \
  tests/speculative/test_engine_lossless.py tests/speculative/test_compiled_verify.py tests/kernels/test_gdn_decode.py \
  -k "cuda or compiled or decode" >> "$OUT/tests.txt" 2>&1
grep -E "FAILED|ERROR|passed|failed" "$OUT/tests.txt" | tail -8
profile="scripts/gpu/round_profile.py --reps 20 --top 10"
timeout "${PDL_SMALL:-90}" python3 $profile --specs ar chain:16 weaver:64 2>&1 | filter > "$OUT/profile_135m.txt"
timeout "${PDL_SMALL:-90}" python3 $profile --specs ar chain:16 weaver:64 --no-inductor-pdl 2>&1 | filter \
  > "$OUT/profile_135m_no_inductor_pdl.txt"
grep -H "^ar step\|^ROUND\|round " "$OUT"/profile_135m*.txt
timeout "${PDL_27B:-220}" python3 $profile --model qwen3.6-27b-shape --drafter published --adapter paper \
  --specs ar chain:16 weaver:64 --equal-tokens 64 2>&1 | filter > "$OUT/profile_27b.txt"
grep "ar step\|^verify\|^ROUND\|^draft\|^commit\|^build\|match" "$OUT/profile_27b.txt"
