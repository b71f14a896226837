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
  *) echo "usage: bash scripts/gpu/travel.sh light|results|full" >&2; exit 2;;
esac
