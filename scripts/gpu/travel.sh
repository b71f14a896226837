#!/usr/bin/env bash
# Here, not on the device: make room in a device call's 64 MiB. The shipped weights (src/weaver/assets: ~51 MB of
# the ~62 MB tree) travel with every call, so a call that carries a GGUF part or training data must leave them
# behind. `light` moves them to .carry/assets and benchmarks/results (~10 MB, never read on the device) to
# .carry/results (both ignored by git); `full` puts them back (results written meanwhile are kept). The device side needs no
# step: scripts/gpu/setup.sh keeps a copy in ~/cache/assets from any call that carried them and restores it into
# the tree of a later call on the warm machine that did not.
#   bash scripts/gpu/travel.sh light   # then calls carrying .gguf parts / data
#   bash scripts/gpu/travel.sh full    # before any commit: git would otherwise see the weights deleted
set -euo pipefail
cd "$(dirname "$0")/../.."
case "${1:-}" in
  light)
    mkdir -p .carry/assets
    for d in src/weaver/assets/smollm2-*; do [ -d "$d" ] && mv "$d" .carry/assets/; done
    [ -d benchmarks/results ] && mv benchmarks/results .carry/results  # ~10 MB the device never reads
    echo "shipped weights and benchmarks/results moved to .carry (run 'bash scripts/gpu/travel.sh full' before" \
      "committing)";;
  full)
    for d in .carry/assets/smollm2-*; do [ -d "$d" ] && mv "$d" src/weaver/assets/; done
    if [ -d .carry/results ]; then
      mkdir -p benchmarks/results && cp -r .carry/results/. benchmarks/results/ && rm -rf .carry/results
    fi
    git status --short src/weaver/assets benchmarks/results | grep . && echo "warning: the tree differs from git" || true
    echo "shipped weights and benchmarks/results back";;
  *) echo "usage: bash scripts/gpu/travel.sh light|full" >&2; exit 2;;
esac
