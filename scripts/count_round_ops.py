"""Count the device ops each stage of one speculative round issues (CPU proxy for kernel launches).

    PYTHONPATH=src python scripts/count_round_ops.py                   # SmolLM2 layout, tiny widths
    PYTHONPATH=src python scripts/count_round_ops.py --fast-verify     # verify through the Triton kernels

The target has SmolLM2-135M's layout (llama, 30 layers, 9 / 3 heads) at tiny widths, bf16 on the CPU
(casts count, as on the GPU), with a random 3-layer drafter (block 16) and a random Weaver of width 512
(issue 4's setting); op counts depend on layer counts and the round's sizes, not on widths. A
TorchDispatchMode records every aten op a stage runs on one steady-state round (after two warm-up
rounds). "ops" counts the ones that launch a kernel on CUDA (views, `empty`, `detach` and CPU-wrapped
scalars excluded); "host syncs" counts reads of device values on the host.
With --fast-verify the verify stage is the FastVerifier: each Triton kernel counts as one op (its
torch reference runs in its place, uncounted). On the GPU the draft and build stages are
torch.compile'd before capture, so their eager counts are an upper bound on their launches.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
from collections import Counter
from types import SimpleNamespace

import torch
from torch.utils._python_dispatch import TorchDispatchMode

STAGES = ("draft", "build", "verify", "accept", "commit")
NO_KERNEL = {"detach", "empty", "empty_strided", "lift_fresh", "_unsafe_view", "alias", "empty_like",
             "scalar_tensor"}  # scalar_tensor: the CPU-wrapped Python scalar of torch.where(mask, x, 0.0)
SYNC = {"_local_scalar_dense", "item", "equal"}


class OpCounter(TorchDispatchMode):
    """Records the aten ops run inside it; `paused()` hides the inner ops of a counted kernel."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: Counter[str] = Counter()
        self.depth = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if self.depth == 0:
            self.ops[func.overloadpacket.__name__ if not func.is_view else "view:" + func.__name__] += 1
        return func(*args, **(kwargs or {}))

    @contextlib.contextmanager
    def paused(self, name: str):
        if self.depth == 0:
            self.ops["triton:" + name] += 1
        self.depth += 1
        try:
            yield
        finally:
            self.depth -= 1

    def kernels(self) -> int:
        return sum(n for op, n in self.ops.items() if not op.startswith("view:") and op not in NO_KERNEL | SYNC)

    def syncs(self) -> int:
        return sum(n for op, n in self.ops.items() if op in SYNC)


def _reference_gemv(x, weight, norm_weight=None, eps=1e-6, norm_out=None, row_tiles=None, **kw):
    """fused_gemv through its torch reference (norm_out included): what the counted launch computes."""
    from weaver.ops.decode import fused_gemv_ref, rms_norm_ref

    if norm_out is not None:
        norm_out.copy_(rms_norm_ref(x, norm_weight, eps))
    return fused_gemv_ref(x, weight, norm_weight=norm_weight, eps=eps, **kw)


def counted_kernels(counter_ref: list) -> SimpleNamespace:
    """FastVerifier's Triton entry points as their torch references, each call counted as one launch.

    (The references keep the count fast on the CPU; the interpreter gives the same count, minutes later.)
    """
    from weaver.ops import decode

    refs = {"fused_gemv": _reference_gemv, "tree_rope_kv_write": decode.tree_rope_kv_write_ref,
            "tree_attention": decode.tree_attention_ref}

    def wrap(name: str, fn):
        @functools.wraps(fn)
        def launch(*a, **kw):
            counter = counter_ref[0]
            with counter.paused(name) if counter is not None else contextlib.nullcontext():
                return fn(*a, **kw)

        return launch

    return SimpleNamespace(**{name: wrap(name, fn) for name, fn in refs.items()})


def build(args: argparse.Namespace):
    """The LLM (SmolLM2 layout, tiny widths) with its drafter and adapter bound to the engine."""
    import weaver
    from weaver.models.presets import preset_config

    if args.layout == "hybrid":  # Qwen3.5/3.6: 3 GDN layers, then 1 gated full-attention layer, repeated
        cfg = preset_config("tiny-qwen3_5", num_hidden_layers=args.layers, vocab_size=args.vocab)
    else:
        cfg = preset_config("tiny-llama", num_hidden_layers=args.layers, num_attention_heads=9,
                            num_key_value_heads=3, hidden_size=9 * 8, intermediate_size=96, vocab_size=args.vocab)
    llm = weaver.LLM.from_config(cfg, random_weights=True, seed=0, drafter="random:3", adapter="random:512",
                                 dtype=args.dtype)
    llm.engine._bind_draft_models()
    return llm


def count_round(llm, method: str, budget: int, counter_ref: list) -> dict[str, OpCounter]:
    """Per-stage counters of the third round of `method` at `budget` (greedy)."""
    from weaver.speculative.round import RoundConfig, decode_round, speculative_prefill
    from weaver.speculative.sampling import SamplingParams

    engine = llm.engine
    cfg = RoundConfig(method=method, budget=budget, rule="greedy", params=SamplingParams())
    cache = engine.cache_for(64 + 4 * (budget + 2))
    state = speculative_prefill(engine.model, engine.drafter, cache, [5, 6, 7, 8, 9, 10, 11, 12], cfg.params, None,
                                engine.options)  # fmt: skip
    stages = engine.stages_for(cfg, None)
    counters: dict[str, OpCounter] = {}

    def counted(name: str, fn, last: bool):
        def run(*args):
            counter = OpCounter()
            counter_ref[0] = counter if last else None
            with counter if last else contextlib.nullcontext(), torch.no_grad():
                out = fn(*args)
            counters[name] = counter
            return out

        return run

    for round_index in range(3):
        decode_round(stages.replace(**{n: counted(n, getattr(stages, n), round_index == 2) for n in STAGES}), state)
    counter_ref[0] = None
    return counters


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--layers", type=int, default=30, help="target layers (SmolLM2-135M: 30, Qwen3.6-27B: 64)")
    parser.add_argument("--layout", default="llama", choices=["llama", "hybrid"],
                        help="llama: SmolLM2's layout; hybrid: Qwen3.5/3.6's GDN + gated attention layers")
    parser.add_argument("--vocab", type=int, default=1024, help="target vocabulary (>= the Weaver pool, 512)")
    parser.add_argument("--dtype", default="bf16", help="model dtype (bf16 as on the GPU: casts count too)")
    parser.add_argument("--fast-verify", action="store_true", help="verify through FastVerifier (interpreted)")
    parser.add_argument("--top", type=int, default=0, help="also list the N most frequent ops per stage")
    args = parser.parse_args()
    torch.set_num_threads(1)
    llm = build(args)
    counter_ref: list = [None]
    if args.fast_verify:
        from weaver.models.fast_verify import FastVerifier

        llm.engine._fast_verify = FastVerifier(llm.model)
        llm.engine._fast_verify.kernels = counted_kernels(counter_ref)
    rows = [("chain", 16), ("weaver", 64)]
    print("| round | " + " | ".join(STAGES) + " | total | host syncs |")
    print("|---|" + "---:|" * (len(STAGES) + 2))
    details = []
    for method, budget in rows:
        counters = count_round(llm, method, budget, counter_ref)
        cells = [counters[s].kernels() for s in STAGES]
        syncs = sum(counters[s].syncs() for s in STAGES)
        print(f"| {method} {budget} | " + " | ".join(map(str, cells)) + f" | {sum(cells)} | {syncs} |")
        details.append((method, budget, counters))
    for method, budget, counters in details if args.top else ():
        for stage in STAGES:
            ops = [(op, n) for op, n in counters[stage].ops.most_common() if not op.startswith("view:")]
            print(f"{method} {budget} {stage}: " + ", ".join(f"{op} {n}" for op, n in ops[: args.top]))


if __name__ == "__main__":
    main()
