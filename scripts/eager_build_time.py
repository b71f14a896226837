"""CPU eager weaver build time (kernels=torch; the engine compiles its stages only on CUDA).

A random released-variant adapter at SmolLM2's shape, budget 64, w 4, c 16: the median of 7 builds after 2 warm-up
ones. The tree's first tokens are printed, so two source trees can be compared on the same inputs:

    for s in .baseline/src src; do PYTHONPATH=$s .venv/bin/python scripts/eager_build_time.py $s; done
"""

from __future__ import annotations

import statistics
import sys
import time

import torch

from weaver.models.config import ModelConfig
from weaver.options import RuntimeOptions
from weaver.speculative.builders.weaver import build_weaver
from weaver.speculative.weaver import RELEASED, WeaverAdapter

VOCAB, TARGET_WIDTH, D_RANK, HEADS, MLP = 49152, 576, 512, 8, 1024


def main() -> int:
    torch.manual_seed(0)
    torch.set_num_threads(2)
    options = RuntimeOptions(kernels="torch")
    target = ModelConfig(vocab_size=VOCAB, hidden_size=TARGET_WIDTH, intermediate_size=4 * TARGET_WIDTH,
                         num_hidden_layers=1)  # fmt: skip
    adapter = WeaverAdapter.random(target, d_rank=D_RANK, num_heads=HEADS, mlp_dim=MLP, max_depth=15, pool_size=512,
                                   **RELEASED).eval().requires_grad_(False)  # fmt: skip
    embed = torch.randn(VOCAB, TARGET_WIDTH)
    adapter.bind(embed, embed * 0.05, options=options)
    root, logits = torch.randint(0, VOCAB, (1,)), torch.randn(1, 15, VOCAB) * 3
    target_hidden, draft_hidden = torch.randn(1, TARGET_WIDTH), torch.randn(1, 15, TARGET_WIDTH)
    seconds = []
    with torch.no_grad():
        for _ in range(9):
            start = time.perf_counter()
            tree = build_weaver(root, logits, 64, adapter=adapter, target_hidden=target_hidden,
                                draft_hidden=draft_hidden, w=4, c=16, options=options)  # fmt: skip
            seconds.append(time.perf_counter() - start)
    label = sys.argv[1] if len(sys.argv) > 1 else ""
    print(f"{label}: median {statistics.median(seconds[2:]) * 1e3:.1f} ms over 7 builds; nodes "
          f"{int(tree.valid.sum())}; first tokens {tree.tokens[0, :8].tolist()}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
