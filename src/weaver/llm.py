"""The public entry point: `weaver.LLM` (DESIGN §14)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from weaver.errors import GenerationConfigError, PromptError
from weaver.models.config import ModelConfig, load_config
from weaver.models.decoder import Decoder
from weaver.models.fuse import fuse_projections
from weaver.models.generation_config import read_generation_config, sampling_defaults
from weaver.models.loading import build_model, init_random_weights, load_weights
from weaver.models.presets import PRESETS, preset_config
from weaver.models.registry import resolve_model_dir, shipped_draft_models
from weaver.models.tokenizer import ByteTokenizer, HFTokenizer, Tokenizer
from weaver.options import RuntimeOptions
from weaver.speculative.accept import resolve_rule
from weaver.speculative.draft_vocab import resolve_draft_vocab
from weaver.speculative.engine import Engine, RoundStats
from weaver.speculative.round import RoundConfig
from weaver.speculative.sampling import SamplingParams

METHODS = ("ar", "chain", "ddtree", "weaver")
_DTYPES = {"fp32": torch.float32, "float32": torch.float32, "bf16": torch.bfloat16,
           "bfloat16": torch.bfloat16, "fp16": torch.float16, "float16": torch.float16}


@dataclass
class GenerationStats:
    method: str
    prompt_tokens: int
    new_tokens: int
    rounds: int  # target verify passes after the prefill
    tau: float  # tokens emitted per verify pass, bonus included
    seconds: float  # wall time of prefill + decoding
    tokens_per_s: float  # new_tokens / seconds
    finish_reason: str  # "eos" | "stop" | "length" | "cancelled" (should_stop)
    stage_seconds: dict[str, float] = field(default_factory=dict)  # total seconds per stage
    accepted_per_depth: list[int] = field(default_factory=list)
    stage_samples: dict[str, list[float]] = field(default_factory=dict)  # per round (prefill: once), seconds


@dataclass
class GenerationOutput:
    token_ids: list[int]
    text: str
    stats: GenerationStats


def resolve_device(device: str | torch.device | None) -> torch.device:
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def resolve_dtype(dtype: str | torch.dtype | None, device: torch.device) -> torch.dtype:
    if dtype is None:
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype not in _DTYPES:
        raise GenerationConfigError(f"unknown dtype {dtype!r}; choose one of {', '.join(_DTYPES)}")
    return _DTYPES[dtype]


class LLM:
    """A target model with its tokenizer and engine; `generate` is lossless for every method."""

    def __init__(
        self,
        model: str = "smollm2",
        drafter: str | None = "auto",
        adapter: str | None = "auto",
        seed: int = 0,
        device: str | torch.device | None = None,
        dtype: str | torch.dtype | None = None,
        max_model_len: int | None = None,
        auto_pull: bool = True,
        options: RuntimeOptions | None = None,
        draft_vocab: str | None = None,
    ) -> None:
        """`drafter` / `adapter`: "auto" (the trained ones weaver ships for a registry model, if any), a checkpoint
        directory (an adapter also as the authors' .pth), "random[:size]", or None for none.
        `options`: how it runs (kernels, compile, CUDA graphs, PDL, tuning); default: from the environment.
        `draft_vocab`: a token map (`weaver data token-map`) the drafter scores alone, or "first:N" (timing only)."""
        options = RuntimeOptions.from_env() if options is None else options
        shipped = shipped_draft_models(model)
        drafter = _auto(drafter, shipped[0])
        adapter = _auto(adapter, shipped[1])
        model_dir = resolve_model_dir(model, auto_pull=auto_pull)
        cfg = load_config(model_dir)
        dev = resolve_device(device)
        target = load_weights(build_model(cfg, dev, resolve_dtype(dtype, dev), options), model_dir)
        tokenizer = HFTokenizer(model_dir, config_eos=cfg.eos_token_id)
        self._setup(target, tokenizer, str(model_dir), max_model_len, drafter, adapter, seed, options, draft_vocab)
        # temperature / top_p / top_k a generate call leaves unset (None) take these (greedy when empty)
        self.generation_defaults = sampling_defaults(read_generation_config(model_dir))

    @classmethod
    def from_config(
        cls,
        cfg: dict[str, Any] | str | Path,
        random_weights: bool = True,
        seed: int = 0,
        drafter: str | None = None,
        adapter: str | None = None,
        device: str | torch.device | None = None,
        dtype: str | torch.dtype | None = None,
        max_model_len: int | None = None,
        tokenizer: Tokenizer | None = None,
        options: RuntimeOptions | None = None,
        draft_vocab: str | None = None,
    ) -> LLM:
        """A model built from a HF config dict, a config.json path, or a preset name (random weights)."""
        options = RuntimeOptions.from_env() if options is None else options
        if not random_weights:
            raise GenerationConfigError("from_config builds random weights; use LLM(path) for a checkpoint")
        if isinstance(cfg, dict):
            model_cfg = ModelConfig.from_hf(cfg)
        elif isinstance(cfg, str) and cfg in PRESETS:
            model_cfg = ModelConfig.from_hf(preset_config(cfg))
        else:
            model_cfg = load_config(cfg)
        dev = resolve_device(device)
        target = init_random_weights(build_model(model_cfg, dev, resolve_dtype(dtype, dev), options), seed=seed)
        self = cls.__new__(cls)
        drafter, adapter = _auto(drafter, None), _auto(adapter, None)  # nothing is trained for random targets
        tok = tokenizer
        if tok is None and model_cfg.vocab_size >= 256:
            tok = ByteTokenizer(model_cfg.vocab_size, model_cfg.eos_token_id)
        self._setup(target, tok, "random", max_model_len, drafter, adapter, seed, options, draft_vocab)
        return self

    def _setup(
        self, target: Decoder, tokenizer, name: str, max_model_len, drafter, adapter, seed, options, draft_vocab=None
    ) -> None:
        self.model = fuse_projections(target)
        self.generation_defaults: dict[str, float | int] = {}
        self.tokenizer = tokenizer
        self.name = name
        self.config = target.config
        self.options = options
        self.context_len = min(target.config.max_position_embeddings, max_model_len or 1 << 62)
        self.seed = seed
        self.drafter = _load_drafter(drafter, target, seed)
        self.adapter = _load_adapter(adapter, target, seed)
        if draft_vocab is not None:
            self._restrict_draft_vocab(draft_vocab)
        self.engine = Engine(target, options, drafter=self.drafter, adapter=self.adapter)

    def set_draft_vocab(self, spec: str | None) -> None:
        """Let the drafter score only a token map's tokens ("first:N": ids below N, for timing random weights;
        None: the whole vocabulary again). The engine is rebuilt: its captured rounds read the old head."""
        self._restrict_draft_vocab(spec)
        min_capacity = self.engine.min_capacity
        self.engine = Engine(self.model, self.options, drafter=self.drafter, adapter=self.adapter)
        self.engine.min_capacity = min_capacity

    def _restrict_draft_vocab(self, spec: str | None) -> None:
        if self.drafter is None:
            raise GenerationConfigError("draft_vocab restricts a drafter's head, but no drafter is loaded")
        lm_head = self.model.lm_head
        self.drafter.restrict_vocab(resolve_draft_vocab(spec, lm_head.out_features), lm_head)

    def _check_method(self, method: str) -> None:
        """The draft models a method needs are there."""
        if method not in METHODS:
            raise GenerationConfigError(f"unknown method {method!r}; choose one of {', '.join(METHODS)}")
        if method != "ar" and self.drafter is None:
            raise GenerationConfigError(
                f"method {method!r} needs a drafter: pass drafter=<checkpoint dir> or drafter='random'"
            )
        if method == "weaver" and self.adapter is None:
            raise GenerationConfigError(
                "method 'weaver' needs a Weaver adapter: pass adapter=<checkpoint dir> or adapter='random'"
            )

    @property
    def eos_token_ids(self) -> list[int]:
        if self.tokenizer is not None:
            return self.tokenizer.eos_token_ids
        return list(self.config.eos_token_id)

    # -- prompts ----------------------------------------------------------------------------------
    def encode_prompt(
        self, prompt: str | Sequence[int], chat: bool = True, chat_template_kwargs: dict[str, Any] | None = None
    ) -> list[int]:
        """Token ids of the prompt (chat template applied to text when chat=True and one exists; its switches,
        e.g. {"enable_thinking": False}, in `chat_template_kwargs`)."""
        if isinstance(prompt, str):
            if not prompt.strip():
                raise PromptError("the prompt is empty")
            if self.tokenizer is None:
                raise PromptError("this model has no tokenizer: pass token ids instead of text")
            if chat:
                ids = self.tokenizer.chat_ids(prompt, chat_template_kwargs)
            else:
                ids = self.tokenizer.encode(prompt)
        else:
            ids = [int(t) for t in prompt]
            if not ids:
                raise PromptError("the prompt is empty")
            bad = [t for t in ids if not 0 <= t < self.config.vocab_size]
            if bad:
                raise PromptError(f"token ids {bad[:5]} are outside the vocabulary [0, {self.config.vocab_size})")
        if len(ids) >= self.context_len:
            raise PromptError(
                f"the prompt has {len(ids)} tokens but the context holds {self.context_len}; shorten it"
            )
        return ids

    # -- scoring ----------------------------------------------------------------------------------
    @torch.no_grad()
    def logits(self, token_ids: Sequence[int]) -> torch.Tensor:
        """Float32 logits [len(token_ids), vocab] of one prefill (scoring and parity checks)."""
        ids = self.encode_prompt(list(token_ids))
        cache = self.engine.cache_for(len(ids))
        out = self.model(torch.tensor([ids], device=self.model.device), cache)
        return out.logits[0]

    # -- generation -------------------------------------------------------------------------------
    def sampling_params(
        self, temperature: float | None = None, top_p: float | None = None, top_k: int | None = None
    ) -> SamplingParams:
        """The caller's sampling values; each one left None takes the checkpoint's generation_config.json default
        (`generation_defaults`), else greedy decoding's (temperature 0, top_p 1, top_k 0)."""
        given = {"temperature": temperature, "top_p": top_p, "top_k": top_k}
        values = {**asdict(SamplingParams()), **self.generation_defaults}
        values.update({name: value for name, value in given.items() if value is not None})
        return SamplingParams(**values)

    def generate(
        self,
        prompt: str | Sequence[int],
        method: str = "ar",
        budget: int = 64,
        temperature: float | None = None,
        top_p: float | None = None,
        top_k: int | None = None,
        max_new_tokens: int = 128,
        seed: int | None = None,
        chat: bool = True,
        stop: Sequence[str] | str | None = None,
        verify: str = "auto",
        on_text: Callable[[str], None] | None = None,
        ignore_eos: bool = False,
        builder_options: dict | None = None,
        chat_template_kwargs: dict[str, Any] | None = None,
        should_stop: Callable[[], bool] | None = None,
    ) -> GenerationOutput:
        """Generate up to `max_new_tokens`; stops on EOS (unless ignore_eos, for benchmarks) or a stop
        string. `on_text` streams text. `builder_options` go to the tree builder (e.g. {"w": 4, "c": 8}).
        temperature / top_p / top_k left None take the checkpoint's generation_config.json defaults (greedy
        without them; verify="greedy" means temperature 0). `chat_template_kwargs`: the chat template's switches,
        e.g. {"enable_thinking": False}. `should_stop` is asked after every round (a server's cancel flag): True
        ends generation there, with finish_reason "cancelled".
        """
        self._check_method(method)
        if max_new_tokens < 1:
            raise GenerationConfigError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        if budget < 1:
            raise GenerationConfigError(f"budget must be >= 1, got {budget}")
        if verify == "greedy" and temperature is None:
            temperature = 0.0
        params = self.sampling_params(temperature, top_p, top_k)
        stops = [stop] if isinstance(stop, str) else list(stop or [])
        ids = self.encode_prompt(prompt, chat=chat, chat_template_kwargs=chat_template_kwargs)
        max_new = min(max_new_tokens, self.context_len - len(ids))
        eos = set() if ignore_eos else set(self.eos_token_ids)
        stats = RoundStats()
        out_ids: list[int] = []
        streamer = _TextStreamer(self.tokenizer, on_text, stops)
        finish = "length"
        t0 = time.perf_counter()
        seed = self.seed if seed is None else seed
        cfg = RoundConfig(method=method, budget=0 if method == "ar" else budget,
                          rule=resolve_rule(verify, params, method), params=params,
                          builder_options=tuple(sorted((builder_options or {}).items())))  # fmt: skip
        rounds = self.engine.generate(ids, cfg, max_new, seed, stats)
        try:
            for new in rounds:
                for tok in new:
                    out_ids.append(tok)
                    if tok in eos:
                        finish = "eos"
                        break
                    if len(out_ids) >= max_new:
                        break
                if finish == "eos" or len(out_ids) >= max_new:
                    break
                if streamer.push(out_ids):
                    finish = "stop"
                    del out_ids[streamer.stop_length(out_ids, len(out_ids) - len(new)) :]
                    break
                if should_stop is not None and should_stop():
                    finish = "cancelled"
                    break
        finally:
            rounds.close()
        seconds = time.perf_counter() - t0
        text = streamer.finish(out_ids, eos)
        return GenerationOutput(
            token_ids=out_ids,
            text=text,
            stats=GenerationStats(
                method=method,
                prompt_tokens=len(ids),
                new_tokens=len(out_ids),
                rounds=stats.rounds,
                tau=stats.tau,
                seconds=seconds,
                tokens_per_s=len(out_ids) / seconds if seconds > 0 else 0.0,
                finish_reason=finish,
                stage_seconds=dict(stats.stage_seconds),
                stage_samples={k: list(v) for k, v in stats.stage_samples.items()},
                accepted_per_depth=list(stats.accepted_per_depth),
            ),
        )



def _auto(spec: str | Path | None, shipped: Path | None) -> str | None:
    """"auto" -> the shipped checkpoint (or None when there is none); anything else unchanged."""
    if spec == "auto":
        return None if shipped is None else str(shipped)
    return None if spec is None or spec == "none" else str(spec)


def _load_drafter(spec: str | None, target: Decoder, seed: int):
    """None, "random[:layers]" (a random DFlash drafter for this target, 1 layer by default) or a checkpoint."""
    if spec is None:
        return None
    from weaver.speculative.drafter import DFlashDrafter

    size = _random_size(spec, default=1)
    if size is not None:
        drafter = DFlashDrafter.random(target.config, num_layers=size, seed=seed)
    else:
        drafter = DFlashDrafter.from_pretrained(spec)
    return drafter.to(device=target.device, dtype=target.dtype).eval().requires_grad_(False).fuse_projections()


def _load_adapter(spec: str | None, target: Decoder, seed: int):
    """None, "random[:width]" (a random Weaver adapter for this target, width 64 by default), a checkpoint
    directory, or the authors' released `.pth` file (checked against the target's hidden size)."""
    if spec is None:
        return None
    from weaver.speculative.weaver import WeaverAdapter

    width = _random_size(spec, default=64)
    if width is not None:
        adapter = WeaverAdapter.random(target.config, d_rank=width, num_heads=4, mlp_dim=2 * width, seed=seed)
    elif Path(spec).is_file():
        adapter = WeaverAdapter.from_released(spec, target.config)
    else:
        adapter = WeaverAdapter.from_pretrained(spec)
    return adapter.to(device=target.device, dtype=target.dtype).eval().requires_grad_(False)


def _random_size(spec: str, default: int) -> int | None:
    """"random" -> default, "random:N" -> N, anything else (a checkpoint path) -> None."""
    if spec == "random":
        return default
    if spec.startswith("random:"):
        size = spec.split(":", 1)[1]
        if not size.isdigit() or int(size) < 1:
            raise GenerationConfigError(f"expected random:<positive int>, got {spec!r}")
        return int(size)
    return None


class _TextStreamer:
    """Incremental detokenisation for streaming and stop strings.

    Holds back a possibly half-decoded UTF-8 character and the last len(longest stop) - 1 characters,
    so streamed text never shows part of a stop string.
    """

    def __init__(self, tokenizer, on_text: Callable[[str], None] | None, stops: list[str]) -> None:
        self.tokenizer = tokenizer
        self.on_text = on_text
        self.stops = [s for s in stops if s]
        self.holdback = max((len(s) for s in self.stops), default=1) - 1
        self.sent = 0
        self.active = tokenizer is not None and (on_text is not None or bool(self.stops))

    def push(self, ids: list[int]) -> bool:
        """Emit new text; True when a stop string appeared."""
        if not self.active:
            return False
        text = self.tokenizer.decode(ids)
        if any(s in text for s in self.stops):
            return True
        safe = len(text.rstrip("\ufffd")) - self.holdback
        self._emit(text[: max(safe, 0)])
        return False

    def stop_length(self, ids: list[int], start: int) -> int:
        """The fewest tokens (at least `start`) whose text holds a stop string: a round's tokens past the stop
        are dropped, so token_ids (and usage counts) do not depend on how many tokens a round emitted."""
        for n in range(max(start, 1), len(ids)):
            text = self.tokenizer.decode(ids[:n])
            if any(s in text for s in self.stops):
                return n
        return len(ids)

    def finish(self, ids: list[int], eos: set[int]) -> str:
        if self.tokenizer is None:
            return ""
        text = self.tokenizer.decode([t for t in ids if t not in eos])
        cut = min((text.find(s) for s in self.stops if s in text), default=-1)
        if cut >= 0:
            text = text[:cut]
        self._emit(text)
        return text

    def _emit(self, text: str) -> None:
        if self.on_text is not None and len(text) > self.sent:
            self.on_text(text[self.sent :])
            self.sent = len(text)
