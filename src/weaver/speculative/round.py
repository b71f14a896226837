"""One decoding round: draft -> build -> verify -> accept -> commit (DESIGN §3), for every method.

`decode_round` below is the whole round. What differs between methods is only which five stage functions
it is given (`Stages`): `speculative_stages` binds a target, a drafter, an adapter and a tree builder;
`ar_stages` is autoregressive decoding as a round of one node (no draft, no tree: the verify is the fused
one-token step). Speed is applied from outside, to the stage functions (`weaver.speculative.capture`:
torch.compile, one CUDA graph per round or per stage), so the round itself stays plain.

State between rounds (`RoundState`): the target caches, the root (the last emitted token, not yet processed
by the target) and, for speculative methods, the drafter's context cache and the target's final-norm hidden
at the position that produced the root (the Weaver adapter's input).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import torch

from weaver.models.cache import ModelCache
from weaver.models.decoder import Decoder
from weaver.options import RuntimeOptions
from weaver.speculative.accept import ACCEPT_RULES, AcceptResult
from weaver.speculative.builders import get_builder
from weaver.speculative.sampling import SamplingParams, process_logits, sample_next_token
from weaver.speculative.tree import DraftTree

__all__ = ["RoundConfig", "RoundState", "Stages", "ar_stages", "decode_round", "speculative_stages"]


@dataclass
class RoundState:
    cache: ModelCache  # target caches (committed tokens)
    root: torch.Tensor  # [B] long: the last emitted token, not yet processed by the target
    context: object = None  # the drafter's DrafterContext (speculative methods)
    target_hidden: torch.Tensor | None = None  # [B, H] final-norm hidden that produced the root


@dataclass(frozen=True)
class RoundConfig:
    """What a round does; hashable, so captured rounds are cached per configuration."""

    method: str  # ar | chain | ddtree | weaver
    budget: int  # non-root nodes per tree (ar: 0)
    rule: str  # an ACCEPT_RULES key (ar: "greedy" or "sample")
    params: SamplingParams
    builder_options: tuple[tuple[str, object], ...] = ()  # sorted (name, value) pairs: w, c, pool_size, ...


@dataclass
class Stages:
    """The five stage functions of one configuration (eager, compiled or graphed: same signatures)."""

    draft: Callable[[RoundState], object]  # -> DraftOutput (marginals, hidden) or None
    build: Callable[[RoundState, object], DraftTree | None]
    verify: Callable[[RoundState, DraftTree | None], object]  # -> ForwardOutput or logits
    accept: Callable[[DraftTree | None, object], AcceptResult | torch.Tensor]
    commit: Callable[[RoundState, DraftTree | None, object, object], torch.Tensor]  # -> emitted [B, P]

    NAMES = ("draft", "build", "verify", "accept", "commit")

    def replace(self, **stages: Callable) -> Stages:
        return Stages(**{name: stages.get(name, getattr(self, name)) for name in self.NAMES})


def decode_round(stages: Stages, state: RoundState) -> torch.Tensor:
    """Advance `state` by one target verify pass; returns the emitted tokens [B, P] (-1 padded, >= 1 a row).

    No host sync: a round can be captured in one CUDA graph and replayed.
    """
    # 1) draft: the drafter's marginals of the next tokens after the root
    draft = stages.draft(state)
    # 2) build: a tree within the budget from those marginals (and, for Weaver, the adapter)
    tree = stages.build(state, draft)
    # 3) verify: one target pass over every node, the committed state read-only
    verified = stages.verify(state, tree)
    # 4) accept: a lossless rule picks the accepted path and the bonus token
    result = stages.accept(tree, verified)
    # 5) commit: the caches along the accepted path; the bonus token becomes the next root
    return stages.commit(state, tree, verified, result)


# ---------------------------------------------------------------- speculative methods (chain, ddtree, weaver)
def speculative_stages(
    target: Decoder, drafter, adapter, cfg: RoundConfig, generator: torch.Generator | None, options: RuntimeOptions,
    fast_verify: Callable | None = None, fast_draft: Callable | None = None,
) -> Stages:
    """The five stages of a speculative round for `cfg` (fast_verify / fast_draft: fused paths, when built)."""
    feature_layers = tuple(drafter.config.target_layer_ids)
    builder = get_builder(cfg.method)
    builder_options = dict(cfg.builder_options)
    embed, lm_head = target.model.embed_tokens, target.lm_head
    draft_fn = fast_draft or functools.partial(drafter.draft, options=options)
    verify_fn = fast_verify or target
    path_len = drafter.config.block_size  # static bound on accepted nodes: the root + one per drafted depth

    def draft(state: RoundState):
        return draft_fn(state.context, state.root, embed, lm_head)

    def build(state: RoundState, draft) -> DraftTree:
        tree = builder(state.root, draft.logits, cfg.budget, adapter=adapter, target_hidden=state.target_hidden,
                       draft_hidden=draft.hidden, options=options, **builder_options)  # fmt: skip
        return tree.with_ancestors(options)  # verify and accept share the ancestor mask

    def verify(state: RoundState, tree: DraftTree):
        return verify_fn(tree.tokens, state.cache, parents=tree.parents, depth=tree.depth,
                         capture_layers=feature_layers, ancestors=tree.ancestor_mask())  # fmt: skip

    def accept(tree: DraftTree, out) -> AcceptResult:
        return accept_tree(tree, out.logits, cfg, generator, path_len, options)

    def commit(state: RoundState, tree: DraftTree, out, result: AcceptResult) -> torch.Tensor:
        target.commit(state.cache, result.path, result.num_accepted)
        path = result.path.clamp(min=0)
        features = out.captured.gather(1, path[:, :, None].expand(-1, -1, out.captured.shape[-1]))
        drafter.append_context(state.context, features, result.num_accepted)
        last = path.gather(1, (result.num_accepted - 1)[:, None])  # [B, 1] last accepted node
        hidden = out.hidden.gather(1, last[:, :, None].expand(-1, -1, out.hidden.shape[-1]))[:, 0]
        state.target_hidden.copy_(hidden)  # in place: captured graphs hold these addresses
        state.root.copy_(result.next_token)
        return result.emitted(tree)

    return Stages(draft, build, verify, accept, commit)


def accept_tree(
    tree: DraftTree, logits: torch.Tensor, cfg: RoundConfig, generator, path_len: int, options: RuntimeOptions
) -> AcceptResult:
    """4) accept: the configuration's lossless rule over the target's logits at every node."""
    rule = ACCEPT_RULES[cfg.rule]
    if cfg.rule == "greedy":
        return rule(tree, logits, path_len=path_len, options=options)
    target_probs = process_logits(logits, cfg.params)
    draft_probs = None
    if cfg.rule == "chain_speculative":  # argmax drafts: the proposal is one-hot on each child's token
        nxt = torch.cat([tree.tokens[:, 1:], tree.tokens[:, -1:]], dim=1)
        draft_probs = torch.nn.functional.one_hot(nxt, logits.shape[-1]).float()
    return rule(tree, target_probs, generator=generator, draft_probs=draft_probs, path_len=path_len)


@torch.no_grad()
def speculative_prefill(
    target: Decoder, drafter, cache: ModelCache, prompt_ids: list[int], params: SamplingParams, generator,
    options: RuntimeOptions, state: RoundState | None = None, forward: Callable | None = None,
) -> RoundState:
    """Prefill the prompt, seed the drafter's context with its features, sample the first root (from an empty
    `cache`; `padded_speculative_prefill` with no padding).

    With `state` (whose cache is `cache`), its tensors are refilled in place: captured rounds keep their
    addresses. `forward`: the target's pass (the engine's fused one where it runs, as for `ar`'s prefill: the
    same prompt K/V on both sides keeps greedy output equal to `ar`'s).
    """
    dev = target.device
    if state is None:
        state = RoundState(cache=cache, root=torch.zeros(1, dtype=torch.long, device=dev),
                           context=drafter.new_context(1, cache.capacity),
                           target_hidden=torch.zeros(1, target.config.hidden_size, dtype=target.dtype, device=dev))
    prompt = torch.tensor([prompt_ids], dtype=torch.long, device=dev)
    count = torch.tensor([len(prompt_ids)], dtype=torch.long, device=dev)
    padded_speculative_prefill(target, drafter, state, prompt, count, params, options, generator, forward)
    return state


def padded_speculative_prefill(
    target: Decoder, drafter, state: RoundState, tokens: torch.Tensor, count: torch.Tensor, params: SamplingParams,
    options: RuntimeOptions, generator: torch.Generator | None = None, forward: Callable | None = None,
) -> torch.Tensor:
    """`speculative_prefill` from empty caches over a padded prompt (tokens [1, bucket], the first count[0] real),
    with no host sync: one captured graph per bucket (attention-only targets: pad K/V land past the committed
    length and pad features in the drafter's scratch slot, where nothing reads them). `forward`: the target's
    pass (default `target` itself; the engine passes the fused one where it runs). Returns the root [B]."""
    cache = state.cache
    cache.lengths.zero_()
    state.context.lengths.zero_()
    out = (forward or target)(tokens, cache, select=count[:, None] - 1,
                              capture_layers=tuple(drafter.config.target_layer_ids))  # fmt: skip
    cache.lengths.copy_(count)  # the pads are not committed
    state.root.copy_(sample_next_token(out.logits[:, 0], params, generator, options))
    state.target_hidden.copy_(out.hidden[:, 0])
    drafter.append_context(state.context, out.captured, counts=count)
    return state.root


# ---------------------------------------------------------------- autoregressive decoding: a one-node round
def ar_stages(
    target: Decoder, params: SamplingParams, generator: torch.Generator | None, options: RuntimeOptions,
    fast_decode: Callable | None = None,
) -> Stages:
    """A round of one node: no draft, no tree; verify = the one-token step (fused on CUDA), accept = sample."""

    def verify(state: RoundState, tree: None) -> torch.Tensor:
        token = state.root[:, None]  # [B, 1]
        return fast_decode(token, state.cache) if fast_decode is not None else target(token, state.cache).logits[:, -1]

    def accept(tree: None, logits: torch.Tensor) -> torch.Tensor:
        return sample_next_token(logits, params, generator, options)  # [B]

    def commit(state: RoundState, tree: None, logits: torch.Tensor, token: torch.Tensor) -> torch.Tensor:
        state.root.copy_(token)  # the step already appended the root's K/V (and GDN state) to the cache
        return state.root[:, None]  # [B, 1]

    return Stages(draft=lambda state: None, build=lambda state, draft: None, verify=verify, accept=accept,
                  commit=commit)  # fmt: skip
