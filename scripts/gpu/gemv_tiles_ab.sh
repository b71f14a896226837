#!/usr/bin/env bash
# Issue 19, one device call: the down projection's GEMV (gemv_tiles, K = 17,408 past GEMV_MAX_K) in the 27B AR
# step. (1) its compiled tests (test_gemv_dispatch.py --triton-full: F.linear, opcheck at the 27B shapes);
# (2) the AR step at the Qwen3.6-27B shape with the down projection on cuBLAS (long_row_tiles patched to None in
# that process: the route before this change) and through gemv_tiles, in alternating processes: event ms, kernels.
#   device run:  source scripts/gpu/setup.sh; bash scripts/gpu/gemv_tiles_ab.sh      (carry .whl)
OUT=${OUT:-/tmp/gemv_tiles_out}
mkdir -p "$OUT"
timeout "${TILES_TESTS:-90}" python3 -m pytest --triton-full -q -rf --tb=short -p no:cacheprovider -n 8 \
  tests/kernels/test_gemv_dispatch.py > "$OUT/tests.txt" 2>&1
tail -3 "$OUT/tests.txt"
profile="scripts/gpu/round_profile.py --model qwen3.6-27b-shape --drafter published --adapter paper --specs ar --reps 20 --top 6"
i=0
for variant in ${TILES_ORDER:-cublas tiles cublas tiles}; do
  i=$((i + 1))
  patch=""
  [ "$variant" = cublas ] && patch="import weaver.kernels.gemv as g; g.long_row_tiles = lambda *a, **k: None; "
  # shellcheck disable=SC2086
  timeout "${TILES_PROFILE:-150}" python3 -c "${patch}import runpy, sys; sys.argv = ['round_profile.py'] + sys.argv[1:]; \
runpy.run_path('scripts/gpu/round_profile.py', run_name='__main__')" ${profile#scripts/gpu/round_profile.py } \
    > "$OUT/ar_${i}_$variant.txt" 2>&1
  echo "$i $variant: $(grep -m1 '^ar step' "$OUT/ar_${i}_$variant.txt")" | tee -a "$OUT/summary.txt"
done
