"""One speculative decoding round: draft -> build -> verify -> accept -> commit (DESIGN §3).

State between rounds (`SpecState`): the target caches, the drafter's context cache (one entry per
committed token the target has processed), the root (last emitted token, not yet processed by the
target) and the target's final-norm hidden at the position that produced the root (Weaver's input).
Every method (chain, ddtree, weaver) runs this same round; only the builder differs.
"""

from __future__ import annotations

import os
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch

from weaver.errors import GenerationConfigError
from weaver.models.cache import ModelCache
from weaver.models.decoder import Decoder
from weaver.speculative.accept import ACCEPT_RULES, AcceptResult
from weaver.speculative.builders import get_builder
from weaver.speculative.sampling import SamplingParams, process_logits, sample_next_token
from weaver.speculative.tree import DraftTree


@dataclass
class SpecState:
    cache: ModelCache  # target caches (committed tokens)
    context: object  # the drafter's DrafterContext
    root: torch.Tensor  # [B] long
    target_hidden: torch.Tensor  # [B, H] final-norm hidden that produced the root


@dataclass
class SpecConfig:
    method: str  # a builder name: chain | ddtree | weaver
    budget: int  # non-root nodes per tree
    rule: str  # a ACCEPT_RULES key
    params: SamplingParams
    builder_options: dict  # extra keyword arguments of the builder (w, c, pool_size, ...)


class SpeculativeDecoder:
    """Binds a target, a drafter and (for the weaver method) an adapter; runs rounds."""

    def __init__(self, target: Decoder, drafter, adapter=None, timer: Callable[[], None] | None = None) -> None:
        self.target = target
        self.drafter = drafter
        self.adapter = adapter
        self.feature_layers = tuple(drafter.config.target_layer_ids)
        self._sync = timer or (lambda: None)
        self._graphs: dict[tuple, object] = {}  # captured rounds (spec.round_graphs), per config and cache
        self.fast_verify = _fast_verifier(target)  # fused Triton tree verify on CUDA, when the model allows
        self.fast_draft = _fast_drafter(drafter, target)  # fused Triton draft on CUDA, when the drafter allows
        # torch.compile'd before capture; a fused draft is already a few launches per layer
        self.compile_stages = tuple(s for s in compile_stages() if not (s == "draft" and self.fast_draft))
        if adapter is not None:
            adapter.bind(target.model.embed_tokens.weight, target.lm_head.weight)

    # -- 0) prefill ---------------------------------------------------------------------------------
    @torch.no_grad()
    def start(
        self, cache: ModelCache, prompt_ids: list[int], params: SamplingParams, generator,
        state: SpecState | None = None,
    ) -> SpecState:
        """Prefill the prompt, seed the drafter's context with its features, sample the first root.

        With `state` (whose cache is `cache`), its tensors are refilled in place: captured round graphs
        keep their addresses.
        """
        prompt = torch.tensor([prompt_ids], dtype=torch.long, device=self.target.device)
        out = self.target(prompt, cache, last_only=True, capture_layers=self.feature_layers)
        root = sample_next_token(out.logits[:, -1], params, generator)
        if state is None:
            state = SpecState(cache=cache, context=self.drafter.new_context(1, cache.capacity), root=root,
                              target_hidden=out.hidden[:, -1].clone())
        else:
            state.context.lengths.zero_()
            state.root.copy_(root)
            state.target_hidden.copy_(out.hidden[:, -1])
        self.drafter.append_context(state.context, out.captured)
        return state

    # -- one round ----------------------------------------------------------------------------------
    @torch.no_grad()
    def decode_round(
        self, state: SpecState, cfg: SpecConfig, generator, times: dict[str, float]
    ) -> tuple[AcceptResult, torch.Tensor]:
        """Advance `state` by one verify pass; returns the accept result and the emitted tokens [B, P]."""
        clock = _Clock(self._sync, times)
        out: dict[str, object] = {}
        for name, run in self.stage_calls(state, cfg, generator, out).items():
            out[name] = run()
            clock.lap(name)
        return out["accept"], out["commit"]

    def stage_calls(self, state: SpecState, cfg: SpecConfig, generator, out: dict) -> dict[str, Callable[[], object]]:
        """The round as five calls, in order; each reads the earlier stages' results from `out` by name."""
        return {
            "draft": lambda: self.stage_draft(state),  # 1) draft
            "build": lambda: self.stage_build(state, out["draft"], cfg),  # 2) build
            "verify": lambda: self.stage_verify(state, out["build"]),  # 3) verify
            "accept": lambda: self._accept(  # 4) accept
                out["build"], out["verify"].logits, cfg, generator, path_len=self.path_len(out["draft"])
            ),
            "commit": lambda: self.stage_commit(state, out["build"], out["verify"], out["accept"]),  # 5) commit
        }

    # The five stages, captured by `spec.round_graphs` into one graph per round or one each (no host syncs).
    def stage_draft(self, state: SpecState):
        """1) draft: marginals of the next block-1 tokens after the root."""
        draft = self.fast_draft or self.drafter.draft
        return draft(state.context, state.root, self.target.model.embed_tokens, self.target.lm_head)

    def stage_build(self, state: SpecState, draft, cfg: SpecConfig) -> DraftTree:
        """2) build: a tree within the budget, carrying its ancestor mask (verify and accept share it)."""
        return get_builder(cfg.method)(
            state.root, draft.logits, cfg.budget, adapter=self.adapter, target_hidden=state.target_hidden,
            draft_hidden=draft.hidden, **cfg.builder_options,
        ).with_ancestors()

    def stage_verify(self, state: SpecState, tree: DraftTree):
        """3) verify: one target pass over every node (committed state read-only)."""
        verify = self.fast_verify or self.target
        return verify(
            tree.tokens, state.cache, parents=tree.parents, depth=tree.depth, capture_layers=self.feature_layers,
            ancestors=tree.ancestor_mask(),
        )

    def stage_commit(self, state: SpecState, tree: DraftTree, out, result: AcceptResult) -> torch.Tensor:
        """5) commit: caches along the accepted path; its features feed the drafter's next round."""
        self.target.commit(state.cache, result.path, result.num_accepted)
        path = result.path.clamp(min=0)
        features = out.captured.gather(1, path[:, :, None].expand(-1, -1, out.captured.shape[-1]))
        self.drafter.append_context(state.context, features, result.num_accepted)
        last = path.gather(1, (result.num_accepted - 1)[:, None])  # [B, 1] last accepted node
        hidden = out.hidden.gather(1, last[:, :, None].expand(-1, -1, out.hidden.shape[-1]))[:, 0]
        state.target_hidden.copy_(hidden)  # in place: captured graphs hold these addresses
        state.root.copy_(result.next_token)
        return result.emitted(tree)

    @staticmethod
    def path_len(draft) -> int:
        """Static bound on accepted nodes (root + one per drafted depth): no host read of the tree depth."""
        return draft.logits.shape[1] + 1

    def _accept(
        self, tree: DraftTree, logits: torch.Tensor, cfg: SpecConfig, generator, path_len: int | None = None
    ) -> AcceptResult:
        """4) accept: a lossless rule picks the path and the bonus token."""
        rule = ACCEPT_RULES[cfg.rule]
        if cfg.rule == "greedy":
            return rule(tree, logits, path_len=path_len)
        target_probs = process_logits(logits, cfg.params)
        draft_probs = None
        if cfg.rule == "chain_speculative":  # argmax drafts: the proposal is one-hot on each child's token
            nxt = torch.cat([tree.tokens[:, 1:], tree.tokens[:, -1:]], dim=1)
            draft_probs = torch.nn.functional.one_hot(nxt, logits.shape[-1]).float()
        return rule(tree, target_probs, generator=generator, draft_probs=draft_probs, path_len=path_len)

    # -- the loop -----------------------------------------------------------------------------------
    def generate(
        self, cache: ModelCache, prompt_ids: list[int], max_new_tokens: int, cfg: SpecConfig, generator, stats,
        use_graphs: bool = False, timing: bool = False, graph_mode: str = "round",
    ) -> Iterator[list[int]]:
        """Yield the tokens each round emits (first the prefill's token, then >= 1 per round).

        use_graphs (CUDA, greedy): rounds replay captured graphs (`spec.round_graphs`), one per round
        (graph_mode "round") or one per stage ("stages"); timing then reads the round's (or each stage's)
        device time from CUDA events instead of synchronising between stages.
        """
        t0 = time.perf_counter()
        graphs = self._round_graphs(cache, prompt_ids, cfg, generator, graph_mode) if use_graphs else None
        self.last_round_graphed = graphs is not None
        state = self.start(cache, prompt_ids, cfg.params, generator, state=graphs.state if graphs else None)
        first = int(state.root[0])
        stats.add_time("prefill", time.perf_counter() - t0)
        yield [first]
        emitted = 1
        while emitted < max_new_tokens:
            times: dict[str, float] = {}
            if graphs is not None:
                result, emitted_tokens = graphs.replay(timing)
            else:
                result, emitted_tokens = self.decode_round(state, cfg, generator, times)
            n = int(result.num_accepted[0])
            tokens = emitted_tokens[0, :n].tolist()  # one host sync per round
            if graphs is not None and timing:
                times = graphs.stage_seconds()
            for stage, seconds in times.items():
                stats.add_time(stage, seconds)
            stats.rounds += 1
            stats.emitted += n
            while len(stats.accepted_per_depth) < n:
                stats.accepted_per_depth.append(0)
            stats.accepted_per_depth[n - 1] += 1  # histogram: rounds that accepted n-1 drafts
            emitted += n
            yield tokens

    def _round_graphs(self, cache: ModelCache, prompt_ids: list[int], cfg: SpecConfig, generator, mode: str):
        """Captured round for (cfg, cache, mode): built once on this prompt's state, then the state is reset."""
        from weaver.speculative.round_graphs import RoundGraphs

        key = (cfg.method, cfg.budget, cfg.rule, tuple(sorted(cfg.builder_options.items())), id(cache), mode)
        if key not in self._graphs:
            state = self.start(cache, prompt_ids, cfg.params, generator)
            try:
                self._graphs[key] = RoundGraphs(self, state, cfg, compile_stages=self.compile_stages, mode=mode)
            except RuntimeError as err:  # an op that cannot be captured: run this config eagerly
                warnings.warn(f"speculative round not captured ({cfg.method}, budget {cfg.budget}): {err}",
                              stacklevel=2)
                self._graphs[key] = None
        cache.reset()
        return self._graphs[key]

def compile_stages() -> tuple[str, ...]:
    """The round stages to torch.compile before capture: WEAVER_COMPILE_STAGES (comma-separated names)
    if set, else every stage but verify (its fused Triton path is already a few kernels per layer); none
    with WEAVER_COMPILE=0. Compiling accept and commit halves them on the H200 (rounds/h200_v4)."""
    if os.environ.get("WEAVER_COMPILE", "1") == "0":
        return ()
    names = os.environ.get("WEAVER_COMPILE_STAGES", "draft,build,accept,commit")
    stages = tuple(name.strip() for name in names.split(",") if name.strip())
    known = ("draft", "build", "verify", "accept", "commit")
    if any(name not in known for name in stages):
        raise GenerationConfigError(f"WEAVER_COMPILE_STAGES={names!r}: stages are {', '.join(known)}")
    return stages


def _fast_verifier(target: Decoder):
    """FastVerifier on CUDA for attention-only models (WEAVER_FAST_VERIFY=0: the torch tree forward), else None.

    Its kernels pass the compiled full-size tests on the H200 (`WEAVER_TRITON_FULL=1 pytest
    tests/kernels/test_tree_attention.py`, benchmarks/results/rounds/h200_v3 and later).
    """
    from weaver.models.fast_decode import unsupported_reason

    if target.device.type != "cuda" or os.environ.get("WEAVER_FAST_VERIFY", "1") == "0":
        return None
    if unsupported_reason(target) is not None:
        return None
    from weaver.models.fast_verify import FastVerifier

    return FastVerifier(target)


def _fast_drafter(drafter, target: Decoder):
    """FastDrafter for a DFlash drafter on CUDA (WEAVER_FAST_DRAFT=0: the torch draft), else None."""
    from weaver.speculative.drafter import DFlashDrafter
    from weaver.speculative.fast_drafter import fast_drafter

    return fast_drafter(drafter, target.lm_head) if isinstance(drafter, DFlashDrafter) else None


class _Clock:
    """Stage timer; `sync` waits for the device first when timing is on (CUDA is asynchronous)."""

    def __init__(self, sync: Callable[[], None], times: dict[str, float]) -> None:
        self.sync, self.times = sync, times
        self.t = time.perf_counter()

    def lap(self, stage: str) -> None:
        self.sync()
        now = time.perf_counter()
        self.times[stage] = self.times.get(stage, 0.0) + now - self.t
        self.t = now
