"""Prompt token ids of a request: the tokenizer's chat template for messages, plain encoding for completions.

A tokenizer without a chat template (the byte tokenizer of random-weight models) gets a plain fallback: one user
message is its text alone (what `LLM.generate(text, chat=True)` feeds the model), several become
"role: content" lines followed by "assistant: ". Context checks happen here too, so a prompt that does not fit
is a 400 before it reaches the queue.
"""

from __future__ import annotations

from typing import Any

from weaver.errors import PromptError
from weaver.serve.config import ServeConfig
from weaver.serve.errors import invalid


def chat_ids(tokenizer: Any, messages: list[dict[str, str]], template_kwargs: dict[str, Any]) -> list[int]:
    """The conversation through the chat template (with its own switches), or the plain fallback."""
    if getattr(tokenizer, "has_chat_template", False):
        try:
            return tokenizer.apply_chat_template(messages, **template_kwargs)
        except Exception as exc:  # a template's own raise_exception(...), a bad kwarg: the request's fault
            raise invalid(f"the chat template rejected the messages: {type(exc).__name__}: {exc}",
                          param="messages", code="chat_template_error") from None  # fmt: skip
    if len(messages) == 1 and messages[0]["role"] == "user":
        return tokenizer.encode(messages[0]["content"])
    text = "".join(f"{m['role']}: {m['content']}\n" for m in messages) + "assistant: "
    return tokenizer.encode(text)


def prompt_ids(llm: Any, prompt: Any, template_kwargs: dict[str, Any]) -> list[int]:
    """Token ids of a checked request's prompt (messages, text or ids); a PromptError becomes a 400."""
    if llm.tokenizer is None and not (isinstance(prompt, list) and all(isinstance(t, int) for t in prompt)):
        raise invalid("this model has no tokenizer: send token ids as the completion prompt", param="prompt")
    try:
        if isinstance(prompt, list) and prompt and isinstance(prompt[0], dict):
            return chat_ids(llm.tokenizer, prompt, template_kwargs)
        return llm.encode_prompt(prompt, chat=False)
    except PromptError as exc:
        raise invalid(str(exc), param="prompt", code="invalid_prompt") from None


def completion_budget(ids: list[int], requested: int | None, cfg: ServeConfig, prompt_param: str) -> int:
    """max_tokens for this prompt: the request's (checked against the context and the cap) or the default."""
    room = cfg.context_len - len(ids)
    if room < 1:
        raise invalid(f"the prompt has {len(ids)} tokens but the context holds {cfg.context_len}; shorten it",
                      param=prompt_param, code="context_length_exceeded")  # fmt: skip
    cap = cfg.limits.max_tokens
    if requested is None:
        return min(cfg.limits.default_max_tokens, room, cap or room)
    if cap is not None and requested > cap:
        raise invalid(f"max_tokens: {requested} is over this server's limit of {cap}", param="max_tokens")
    if requested > room:
        raise invalid(f"this model's context holds {cfg.context_len} tokens, but {len(ids)} prompt tokens + "
                      f"max_tokens {requested} = {len(ids) + requested}; lower max_tokens",
                      param="max_tokens", code="context_length_exceeded")  # fmt: skip
    return requested
