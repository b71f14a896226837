#!/usr/bin/env bash
# H200: autoregressive tok/s of weaver vs transformers (issue 2). Needs part 2 of the GGUF carried
# (part 1 copied to ~/cache by the previous call) and .whl: see setup.sh.
# 1) the fused decode kernels compiled at full size against their references; 2) weaver's default
# decode (fused Triton step) next to transformers' static-cache generate, 256 tokens, in one run;
# 3) weaver alone at 1024 tokens (attention cost grows with the context).
# The launch-config sweep behind gemv_config: `python3 scripts/gpu/decode_sweep.py`; the torch
# (compiled + graphed) decode step: add `--kernels torch` to the bench.
set -e
source scripts/gpu/setup.sh
filter() { grep -v "Loading weights\|clean_up_tokenization\|TensorFloat32\|warnings.warn"; }
python3 -m weaver.cli models pull smollm2 2>&1 | tail -1
(cd tests/ops && python3 -m pytest --triton-full -q -p no:cacheprovider test_triton_decode.py 2>&1 | tail -3) | tee "$OUT/tests_gpu.txt"
python3 -m weaver.cli bench ar --device cuda --dtype bf16 --new-tokens 256 --runs 5 --out "$OUT/bench_ar.json" 2>&1 \
  | filter | tee "$OUT/bench_ar.txt"
python3 -m weaver.cli bench ar --device cuda --dtype bf16 --new-tokens 1024 --runs 3 --no-transformers \
  --out "$OUT/bench_ar_1024.json" 2>&1 | filter | tee "$OUT/bench_ar_1024.txt"
