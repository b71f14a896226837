"""Request checks without a server: which sampling values a request runs with when it leaves them unset."""

from __future__ import annotations

import pytest

from weaver.serve.config import ServeConfig
from weaver.serve.protocol import ChatCompletionRequest, check_chat


def _config(defaults: dict[str, float]) -> ServeConfig:
    return ServeConfig(model_id="m", context_len=64, method="ar", budget=16, methods=("ar",), budgets=(16,),
                       sampling_defaults=tuple(sorted(defaults.items())))  # fmt: skip


def _chat(**fields) -> ChatCompletionRequest:
    return ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "hi"}], **fields)


@pytest.mark.parametrize(
    ("defaults", "request_fields", "want"),
    [
        ({}, {}, (1.0, 1.0, 0)),  # no generation_config sampling values: OpenAI's defaults
        ({"temperature": 0.6, "top_p": 0.95, "top_k": 20}, {}, (0.6, 0.95, 20)),  # the checkpoint's (vLLM does this)
        ({"temperature": 0.6, "top_p": 0.95, "top_k": 20}, {"temperature": 0.9, "top_k": -1}, (0.9, 0.95, 0)),
        ({"temperature": 0.6, "top_p": 0.95, "top_k": 20}, {"temperature": 0}, (0.0, 1.0, 0)),  # greedy: one config
    ],
)
def test_unset_sampling_values_take_the_checkpoint_defaults(defaults, request_fields, want):
    gen = check_chat(_chat(**request_fields), _config(defaults))
    assert (gen.temperature, gen.top_p, gen.top_k) == want
