#!/usr/bin/env bash
# H200: `weaver bench serve` on SmolLM2 (issue 18): 32 clients x 4 requests (chat / completions, greedy / sampled,
# streamed / not) against `weaver serve` on loopback, every response checked; p50/p90/p99 TTFT, ITL, end-to-end.
# Two calls, as for ar.sh (see setup.sh): call 1 carries .gguf/smollm2.gguf.part.aa and runs
#   mkdir -p ~/cache && cp .gguf/smollm2.gguf.part.aa ~/cache/
# call 2 (machine still warm) carries .gguf/smollm2.gguf.part.ab and .whl-serve/ (the server's wheels the image
# lacks: fastapi, starlette, uvicorn, pydantic, pydantic-core, annotated-types, typing-inspection, annotated-doc,
# typing-extensions, opentelemetry-api; `pip download` them for cp312 beforehand) and runs this script.
# 1) the default model, method auto (= ar: no trained drafter ships), 64 tokens a request;
# 2) the same with a random drafter and Weaver adapter, method weaver budget 64 (the speculative path under load:
#    tau ~ 1 with random draft models, so it is slower than ar; the point is 0 lost / malformed);
# 3) the slow test: the server's greedy answer equals LLM("smollm2").generate (on the CPU, both sides).
set -e
OUT=${OUT:-/tmp/out}
mkdir -p .whl && cp .whl-serve/*.whl .whl/
source scripts/gpu/setup.sh
source scripts/gpu/common.sh
python3 -m weaver.cli models pull smollm2 2>&1 | tail -1
timeout 230 python3 -m weaver.cli bench serve --clients 32 --requests 4 --max-tokens 64 --time-limit 150 --startup-timeout 150 \
  --out "$OUT/smollm2_auto" -- --model smollm2 2>&1 | filter | tee "$OUT/smollm2_auto.txt" || echo "FAILED: smollm2_auto"
timeout 230 python3 -m weaver.cli bench serve --clients 32 --requests 4 --max-tokens 64 --time-limit 150 --startup-timeout 150 \
  --out "$OUT/smollm2_weaver_random" -- --model smollm2 --drafter random --adapter random --method weaver \
  --budget 64 --methods weaver 2>&1 | filter | tee "$OUT/smollm2_weaver_random.txt" \
  || echo "FAILED: smollm2_weaver_random"
timeout 100 python3 -m pytest -q -p no:cacheprovider -m slow tests/serve/test_lifecycle.py 2>&1 | tail -3 \
  | tee "$OUT/tests_serve_slow.txt" || echo "FAILED: slow serve test"
