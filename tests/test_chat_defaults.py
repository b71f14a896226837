"""A checkpoint's chat_template.jinja (and its switches) and generation_config.json defaults, API and CLI."""

from __future__ import annotations

import json

import pytest
from safetensors.torch import save_file

import weaver
from weaver.cli import main
from weaver.models.generation_config import sampling_defaults
from weaver.models.presets import preset_config
from weaver.speculative.sampling import SamplingParams

WORDS = ["user", "assistant", "nothink", "hello"]
TEMPLATE = ("{% for m in messages %}{{ m.role }} {{ m.content }} {% endfor %}{% if add_generation_prompt %}assistant"
            "{% if enable_thinking is defined and not enable_thinking %} nothink{% endif %}{% endif %}")


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A random tiny llama directory: word-level tokenizer.json, chat_template.jinja, generation_config.json."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    path = tmp_path_factory.mktemp("chat")
    cfg = preset_config("tiny-llama", vocab_size=300)
    llm = weaver.LLM.from_config(cfg, random_weights=True, seed=3)
    (path / "config.json").write_text(json.dumps(cfg))
    save_file({k: v.clone() for k, v in llm.model.state_dict().items()}, str(path / "model.safetensors"))
    vocab = {f"<{i}>": i for i in range(300 - len(WORDS))} | {w: 300 - len(WORDS) + i for i, w in enumerate(WORDS)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<0>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(path / "tokenizer.json"))
    (path / "chat_template.jinja").write_text(TEMPLATE)
    gen = {"do_sample": True, "temperature": 0.7, "top_p": 0.9, "top_k": 5, "eos_token_id": [7, 9]}
    (path / "generation_config.json").write_text(json.dumps(gen))
    return path


def test_chat_template_and_its_switches(checkpoint):
    llm = weaver.LLM(str(checkpoint))
    assert llm.tokenizer.has_chat_template
    thinking = llm.encode_prompt("hello")
    assert llm.tokenizer.decode(thinking).split() == ["user", "hello", "assistant"]
    plain = llm.encode_prompt("hello", chat_template_kwargs={"enable_thinking": False})
    assert plain == thinking + [llm.tokenizer.encode("nothink")[0]]
    out = llm.generate("hello", max_new_tokens=1, chat_template_kwargs={"enable_thinking": False})
    assert out.stats.prompt_tokens == len(plain)
    with pytest.raises(weaver.GenerationConfigError, match="chat_template_kwargs"):
        llm.encode_prompt("hello", chat_template_kwargs={"add_generation_prompt": False})


def test_generation_config_fills_what_the_caller_leaves_unset(checkpoint):
    llm = weaver.LLM(str(checkpoint))
    assert {2, 7, 9} <= set(llm.eos_token_ids)  # config.json's, and generation_config.json's
    assert llm.sampling_params() == SamplingParams(temperature=0.7, top_p=0.9, top_k=5)
    assert llm.sampling_params(temperature=0.0) == SamplingParams(temperature=0.0, top_p=0.9, top_k=5)
    kw = dict(max_new_tokens=6, seed=4, ignore_eos=True)
    assert llm.generate([5, 6, 7], **kw).token_ids == llm.generate([5, 6, 7], temperature=0.7, top_p=0.9, top_k=5,
                                                                   **kw).token_ids  # fmt: skip
    greedy = llm.generate([5, 6, 7], temperature=0.0, **kw).token_ids
    assert llm.generate([5, 6, 7], verify="greedy", **kw).token_ids == greedy  # greedy rule: temperature 0
    assert weaver.LLM.from_config("tiny-llama").sampling_params() == SamplingParams()  # no file: greedy


def test_sampling_defaults_follow_do_sample():
    assert sampling_defaults({"temperature": 0.6, "top_p": 0.95}) == {}  # transformers' default: do_sample false
    assert sampling_defaults({"do_sample": False, "temperature": 0.6}) == {}
    assert sampling_defaults({"do_sample": True, "temperature": 0.6, "top_k": 20}) == {"temperature": 0.6, "top_k": 20}


def test_cli_template_switches(checkpoint, capsys):
    assert main(["generate", "hello", "--model", str(checkpoint), "--no-thinking", "--max-new-tokens", "2"]) == 0
    assert main(["generate", "hello", "--model", str(checkpoint), "--chat-template-kwargs", "{bad"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: --chat-template-kwargs is not valid JSON")
