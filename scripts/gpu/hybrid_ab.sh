#!/usr/bin/env bash
# H200, issue 19: the two hybrid-path changes of 2026-12-03, checked and timed against their baselines in one call.
#   1. the fused GDN decode step (weaver.kernels.triton.gdn_decode): its tests compiled at the Qwen3.6-27B GDN shape
#      (pytest --triton-full tests/kernels/test_gdn_decode.py), then the 27B-shape AR step with the torch GDN path
#      (--kernels torch: the baseline) and with the kernel (auto), each in its own process, back to back
#      (round_profile.py: device ms, kernel count, top kernels);
#   2. the hybrid verify uncompiled (before) and compiled (now), one process: hybrid_verify_ab.py.
#   device run:  bash scripts/gpu/hybrid_ab.sh      (no carry needed; HYBRID_AB_PARTS="decode verify" by default)
OUT=${OUT:-/tmp/hybrid_ab}
mkdir -p "$OUT"
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader | tee "$OUT/gpu.txt"
for part in ${HYBRID_AB_PARTS:-decode verify}; do
  if [ "$part" = decode ]; then
    timeout 150 python3 -m pytest -q -p no:cacheprovider --triton-full tests/kernels/test_gdn_decode.py 2>&1 \
      | tail -15 | tee "$OUT/tests_full.txt"
    for kernels in torch auto; do
      echo "### --kernels $kernels" | tee -a "$OUT/ar_27b_ab.txt"
      timeout 150 python3 scripts/gpu/round_profile.py --model qwen3.6-27b-shape --specs ar --drafter random:1 \
        --adapter random:64 --top 14 --reps 20 --kernels $kernels 2>&1 | grep -v "Warning\|warn" \
        | tee -a "$OUT/ar_27b_ab.txt"
    done
  elif [ "$part" = verify ]; then
    timeout ${VERIFY_AB_S:-400} python3 scripts/gpu/hybrid_verify_ab.py --out "$OUT/verify_ab.json" 2>&1 \
      | grep -v "Warning\|warn" | tee "$OUT/verify_ab.txt"
  fi
done
