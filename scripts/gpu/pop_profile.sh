#!/usr/bin/env bash
# GPU, session 43 (issues 17 and 19), one call (results in $OUT):
#   call 1: PHASE=kernels    scripts/gpu/pop_ab.py (the build's pop launch and node attention, alone, at the paper's
#                            and SmolLM2's adapter widths); then round_profile.py at SmolLM2's shape (ar, chain 16,
#                            ddtree 16) with random 4- and 6-layer drafters (what the drafter's two added layers cost
#                            a round: the H100's chain-15 rounds of session 42 were 0.27 ms above the H200's of
#                            session 28, which had the 4-layer drafter).
#   (As run, at 10bac22, the call also picked pop_ab's fastest 27B pop config, 8:2048, for a second phase: the 27B
#   weaver-64 profile with it. The phase was deleted unrun and the pick with it: the configs differ by at most ~1.1 us
#   a step, kernels/h100_session43_pop/COMMAND.txt.)
OUT=${OUT:-/tmp/pop_out}
source "$(dirname "$0")/setup.sh" > "$OUT/gpu.txt" 2>&1  # not through a pipe: its exports must stay
cat "$OUT/gpu.txt"
case "${PHASE:-kernels}" in
  kernels)
    timeout "${POP_AB_S:-150}" python3 scripts/gpu/pop_ab.py > "$OUT/pop_ab.txt" 2>&1
    echo "pop_ab rc $?"
    for layers in 4 6; do
      timeout "${POP_ROUNDS_S:-150}" python3 scripts/gpu/round_profile.py --specs ar chain:16 ddtree:16 \
        --drafter "random:$layers" --reps 20 --top 12 > "$OUT/profile_d$layers.txt" 2>&1
      echo "profile d$layers rc $?"
    done
    grep -E "^(##|draft|build|verify|accept|commit|ROUND)" "$OUT"/profile_d*.txt;;
esac
