"""Batched autoregressive decoding for regeneration: many prompts at once through the target's static cache.

The engine decodes batch 1 (what a user's request needs); regeneration wants hundreds of replies per step. The
target's own `Decoder.forward` already keeps one committed length per batch row, so a batch of right-padded
prompts is prefilled in row chunks (each row's length then set to its own prompt length: the pad slots past it
are masked and later overwritten), and every decode step is one forward of [B, 1] tokens. On CUDA that step is
captured once in a graph and replayed, so a step costs its kernels and no Python. Greedy rows take the argmax;
sampled rows (T=1) take argmax(logits - log E) with E ~ Exp(1), which samples softmax(logits) exactly.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from weaver.models.cache import AttentionCache, GDNCache, ModelCache
from weaver.models.decoder import Decoder

__all__ = ["decode_batch", "row_view"]


def row_view(cache: ModelCache, start: int, stop: int) -> ModelCache:
    """The cache of rows [start, stop) as views of the same memory (writes land in the full cache)."""
    layers: list[AttentionCache | GDNCache] = []
    for layer in cache.layers:
        if isinstance(layer, GDNCache):
            layers.append(GDNCache(state=layer.state[start:stop], conv=layer.conv[start:stop], index=layer.index))
        else:
            layers.append(AttentionCache(k=layer.k[start:stop], v=layer.v[start:stop]))
    stacked = tuple(x[:, start:stop] for x in cache.stacked_kv)
    gdn = None if cache.stacked_gdn is None else tuple(x[:, start:stop] for x in cache.stacked_gdn)
    return ModelCache(lengths=cache.lengths[start:stop], layers=layers, capacity=cache.capacity,
                      stacked_kv=stacked, stacked_gdn=gdn)


def _next_tokens(logits: torch.Tensor, sample: torch.Tensor) -> torch.Tensor:
    """[B] next tokens from float32 logits [B, V]: argmax where not sampled, a T=1 sample where sampled."""
    noise = torch.empty_like(logits).exponential_().log_()
    return torch.where(sample[:, None], logits - noise, logits).argmax(-1)


@torch.no_grad()
def decode_batch(model: Decoder, prompts: Sequence[Sequence[int]], max_new_tokens: int, eos: Sequence[int],
                 sample: Sequence[bool] | bool = False, prefill_rows: int = 64, graph: bool | None = None
                 ) -> list[list[int]]:
    """Replies (token ids, cut after the first EOS) to every prompt, decoded together.

    sample: per prompt (or for all) whether it is answered by sampling at T=1 instead of greedily.
    prefill_rows: rows per prefill forward (bounds the prompt activations); graph: CUDA-graph the decode step
    (default: on CUDA); hybrid (GDN) targets prefill row by row. The greedy replies equal batch-1 greedy
    decoding up to floating-point rounding."""
    if not prompts:
        return []
    if max_new_tokens < 1:
        raise ValueError("max_new_tokens must be >= 1")
    device = model.device
    b = len(prompts)
    lens = torch.tensor([len(p) for p in prompts])
    if int(lens.min()) < 1:
        raise ValueError("every prompt needs at least one token")
    width = int(lens.max())
    flags = [bool(sample)] * b if isinstance(sample, bool) else [bool(s) for s in sample]
    sample_rows = torch.tensor(flags, device=device)
    if model.config.has_gdn:
        prefill_rows = 1  # a GDN layer's state would run on through the pad tokens: no padding at all
    cache = model.allocate_cache(b, width + max_new_tokens)
    first = torch.empty(b, dtype=torch.long, device=device)
    for start in range(0, b, prefill_rows):
        stop = min(start + prefill_rows, b)
        rows = prompts[start:stop]
        w = max(len(p) for p in rows)
        tokens = torch.zeros(stop - start, w, dtype=torch.long)
        for i, p in enumerate(rows):
            tokens[i, : len(p)] = torch.as_tensor(list(p))
        view = row_view(cache, start, stop)
        last = (lens[start:stop] - 1).to(device)
        out = model(tokens.to(device), view, select=last[:, None])
        view.lengths.copy_(lens[start:stop].to(device))  # pad slots past each prompt are masked, then overwritten
        first[start:stop] = _next_tokens(out.logits[:, 0], sample_rows[start:stop])
    step_in = first[:, None].clone()

    def step() -> torch.Tensor:
        logits = model(step_in, cache).logits[:, 0]
        return _next_tokens(logits, sample_rows)

    use_graph = device.type == "cuda" if graph is None else graph
    out_ids = torch.empty(b, max_new_tokens, dtype=torch.long, device=device)
    out_ids[:, 0] = first
    eos_t = torch.tensor(sorted(set(eos)), device=device)
    done = torch.isin(first, eos_t)
    replay = None
    if use_graph and max_new_tokens > 1:
        from weaver.speculative.capture import capture

        saved = cache.lengths.clone()
        graph_obj, graph_out = capture(step, warmup=2)
        cache.lengths.copy_(saved)  # the warm-ups advanced every row; their stale slots get overwritten
        replay = (graph_obj, graph_out)
    n = 1
    while n < max_new_tokens:
        if replay is not None:
            replay[0].replay()
            nxt = replay[1]
        else:
            nxt = step()
        out_ids[:, n] = nxt
        step_in[:, 0] = nxt
        done |= torch.isin(nxt, eos_t)
        n += 1
        if n % 32 == 0 and bool(done.all()):
            break
    rows_out = out_ids[:, :n].tolist()
    eos_set = set(eos)
    return [row[: next((j + 1 for j, t in enumerate(row) if t in eos_set), len(row))] for row in rows_out]
