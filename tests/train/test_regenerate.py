"""`weaver data regenerate` on SmolLM2 (CPU, fp32, a few tokens): the greedy half of the shards is what
`weaver.LLM(...).generate` says greedily, the prompts are the chat template's, and a rerun resumes (skips)."""

from __future__ import annotations

import json

import torch

import weaver
from weaver.models.registry import resolve_model_dir
from weaver.train.regenerate import RegenerateConfig, regenerate
from weaver.train.shards import read_shard

PROMPTS = ["What is 2+2?", "Name a colour."]


def test_regenerated_greedy_replies_equal_the_engine_and_rerun_resumes(tmp_path) -> None:
    path = tmp_path / "prompts.jsonl"
    path.write_text("".join(json.dumps({"messages": [{"role": "user", "content": p}]}) + "\n" for p in PROMPTS))
    cfg = RegenerateConfig(batch_size=2, max_new_tokens=6, sampled_fraction=0.0, shard_size=2)
    model_dir = resolve_model_dir("smollm2")
    summary = regenerate(model_dir, path, tmp_path / "out", cfg, device="cpu", dtype=torch.float32, progress=False)
    assert summary["written"] == 1 and summary["reply_tokens"] > 0
    tokens, offsets, prompt_lens = read_shard(tmp_path / "out" / "shard_00000.npz")
    llm = weaver.LLM("smollm2", drafter=None, adapter=None, device="cpu", dtype="fp32")
    got = {}
    for i in range(len(prompt_lens)):
        seq = tokens[offsets[i] : offsets[i + 1]].tolist()
        got[tuple(seq[: prompt_lens[i]])] = seq[prompt_lens[i] :]
    for p in PROMPTS:
        ids = llm.encode_prompt(p)
        assert tuple(ids) in got  # the same chat template
        want = llm.generate(p, max_new_tokens=6).token_ids
        assert got[tuple(ids)] == want
    again = regenerate(model_dir, path, tmp_path / "out", cfg, device="cpu", dtype=torch.float32, progress=False)
    assert again["written"] == 0  # the shard was there: resumed, nothing regenerated
