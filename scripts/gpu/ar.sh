#!/usr/bin/env bash
# H200: autoregressive tok/s of weaver vs transformers (issue 2). Needs part 2 of the GGUF carried
# (part 1 copied to ~/cache by the previous call) and .whl: see setup.sh.
set -e
source scripts/gpu/setup.sh
python3 -m weaver.cli models pull smollm2 2>&1 | tail -1
python3 -m weaver.cli bench ar --device cuda --dtype bf16 --new-tokens 256 --runs 5 --out "$OUT/bench_ar.json" 2>&1 \
  | grep -v "Loading weights\|clean_up_tokenization\|TensorFloat32\|warnings.warn" | tee "$OUT/bench_ar.txt"
