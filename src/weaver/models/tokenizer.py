"""Tokenizers: the checkpoint's HF tokenizer (with its chat template), or bytes for random models."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Protocol

from weaver.errors import CheckpointError, GenerationConfigError, PromptError
from weaver.models.generation_config import eos_token_ids, read_generation_config


class Tokenizer(Protocol):
    eos_token_ids: list[int]
    has_chat_template: bool

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: list[int]) -> str: ...

    def chat_ids(self, user_message: str, template_kwargs: dict[str, Any] | None = None) -> list[int]: ...


class HFTokenizer:
    """A `tokenizer.json` directory through transformers (fast tokenizer + jinja chat template, from
    `chat_template.jinja` or tokenizer_config.json). EOS ids: the model config's, the tokenizer's and
    generation_config.json's together."""

    def __init__(self, model_dir: str | Path, config_eos: list[int] | None = None) -> None:
        from transformers import AutoTokenizer

        model_dir = Path(model_dir)
        try:
            self._tok = AutoTokenizer.from_pretrained(str(model_dir))
        except (OSError, ValueError, json.JSONDecodeError) as exc:
            raise CheckpointError(f"cannot load the tokenizer in {model_dir}: {exc}") from None
        eos = set(config_eos or [])
        if self._tok.eos_token_id is not None:
            eos.add(int(self._tok.eos_token_id))
        eos.update(eos_token_ids(read_generation_config(model_dir)))
        self.eos_token_ids = sorted(eos)
        self.has_chat_template = bool(getattr(self._tok, "chat_template", None))

    def encode(self, text: str) -> list[int]:
        return list(self._tok.encode(text, add_special_tokens=False))

    def decode(self, ids: list[int]) -> str:
        return self._tok.decode(ids, skip_special_tokens=True)

    def chat_ids(self, user_message: str, template_kwargs: dict[str, Any] | None = None) -> list[int]:
        """The user message through the chat template; `template_kwargs` are the template's own switches
        (e.g. {"enable_thinking": False} for Qwen3.6), passed to it as variables."""
        kwargs = check_template_kwargs(template_kwargs)
        if not self.has_chat_template:
            return self.encode(user_message)
        return self.apply_chat_template([{"role": "user", "content": user_message}], **kwargs)

    def apply_chat_template(self, messages: list[dict[str, str]], **template_kwargs: object) -> list[int]:
        """Token ids of a whole conversation plus the assistant's turn opening; `template_kwargs` are the
        template's own switches (e.g. enable_thinking). Needs has_chat_template."""
        out = self._tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, **template_kwargs)
        if isinstance(out, dict) or hasattr(out, "input_ids"):
            out = out["input_ids"]
        return [int(t) for t in out]


class ByteTokenizer:
    """UTF-8 bytes as token ids 0..255 (random-weight models without a tokenizer); no chat template."""

    def __init__(self, vocab_size: int, eos_token_ids: list[int] | None = None) -> None:
        if vocab_size < 256:
            raise PromptError(
                f"this model has no tokenizer and a vocabulary of {vocab_size} < 256: pass token ids, not text"
            )
        self.eos_token_ids = list(eos_token_ids or [])
        self.has_chat_template = False

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids: list[int]) -> str:
        return bytes(i for i in ids if 0 <= i < 256).decode("utf-8", errors="replace")

    def chat_ids(self, user_message: str, template_kwargs: dict[str, Any] | None = None) -> list[int]:
        check_template_kwargs(template_kwargs)
        return self.encode(user_message)


# apply_chat_template's own arguments: a template variable of the same name would silently change what it does
_RESERVED = {"conversation", "tools", "documents", "chat_template", "add_generation_prompt",
             "continue_final_message", "tokenize", "padding", "truncation", "max_length", "return_tensors",
             "return_dict", "return_assistant_tokens_mask", "tokenizer_kwargs", "messages"}


def check_template_kwargs(template_kwargs: dict[str, Any] | None) -> dict[str, Any]:
    """`template_kwargs` as a dict of template variables (GenerationConfigError when it is not one)."""
    if template_kwargs is None:
        return {}
    if not isinstance(template_kwargs, dict) or not all(isinstance(k, str) for k in template_kwargs):
        raise GenerationConfigError(f"chat_template_kwargs must be a dict of names to values, got {template_kwargs!r}")
    reserved = sorted(set(template_kwargs) & _RESERVED)
    if reserved:
        raise GenerationConfigError(f"chat_template_kwargs may not set {reserved}: they are apply_chat_template's own")
    return dict(template_kwargs)
