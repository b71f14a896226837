"""Draft vocabularies (speculative.draft_vocab): the restricted head equals the full one on its tokens and is -inf
elsewhere, token maps round-trip and refuse bad files, and decoding with one stays lossless."""

from __future__ import annotations

import pytest
import torch
from helpers.drafters import VOCAB, make_drafter, random_features, target_io
from safetensors.torch import save_file

import weaver
from weaver.cli import main as cli_main
from weaver.errors import CheckpointError, GenerationConfigError
from weaver.models.presets import preset_config
from weaver.speculative.draft_vocab import (
    count_tokens,
    expand_logits,
    frequent_token_ids,
    load_token_map,
    resolve_draft_vocab,
    save_token_map,
)
from weaver.testing import assert_close


def test_expand_logits_places_rows_and_fills_minus_inf():
    gen = torch.Generator().manual_seed(0)
    ids = torch.tensor([1, 4, 5, 9])
    sub = torch.randn(2, 3, 4, generator=gen)
    full = expand_logits(sub, ids, 12)
    assert full.shape == (2, 3, 12)
    assert torch.equal(full[..., ids], sub)
    rest = torch.tensor([i for i in range(12) if i not in ids.tolist()])
    assert torch.isneginf(full[..., rest]).all()


def test_frequent_token_ids_ranks_by_count_then_id_and_keeps_forced_ids():
    counts = count_tokens([[3, 3, 3, 7, 7, 1], [7, 2, 2, 5, 40]], vocab_size=64)
    assert counts[3] == 3 and counts[7] == 3 and counts[2] == 2 and counts.sum() == 11
    ids = frequent_token_ids(counts, 32, always=[63])
    seen = [63, 3, 7, 2, 1, 5, 40]  # forced, then by count (3, 3, 2, 1, 1, 1), ties in id order
    unseen = [t for t in range(64) if t not in seen][:25]  # then count 0, in id order
    assert ids.tolist() == sorted(seen + unseen)
    with pytest.raises(GenerationConfigError, match="32..64"):
        frequent_token_ids(counts, 16)


def test_token_map_round_trip_and_bad_files(tmp_path):
    ids = torch.arange(0, 128, 3)
    path = tmp_path / "map.safetensors"
    save_token_map(path, ids, 300)
    assert torch.equal(load_token_map(path, 300), ids)
    with pytest.raises(CheckpointError, match="built for a vocabulary of 300"):
        load_token_map(path, 301)
    with pytest.raises(CheckpointError, match="no such token map"):
        load_token_map(tmp_path / "missing.safetensors", 300)
    bad = tmp_path / "bad.safetensors"
    for tensors, match in [
        ({"other": ids}, "not a token map"),
        ({"token_ids": ids.flip(0).contiguous()}, "sorted and distinct"),
        ({"token_ids": torch.arange(270, 310)}, "outside 0..299"),
        ({"token_ids": torch.arange(8)}, "32..300"),
        ({"token_ids": torch.rand(40)}, "integer"),
    ]:
        save_file(tensors, str(bad))
        with pytest.raises(CheckpointError, match=match):
            load_token_map(bad, 300)
    bad.write_bytes(b"not safetensors at all")
    with pytest.raises(CheckpointError, match="not a readable"):
        load_token_map(bad, 300)
    assert torch.equal(resolve_draft_vocab("first:40", 300), torch.arange(40))
    with pytest.raises(GenerationConfigError, match="first:<int>"):
        resolve_draft_vocab("first:x", 300)


@torch.no_grad()
def test_restricted_draft_equals_the_full_draft_on_its_tokens():
    drafter = make_drafter()
    embed, head = target_io()
    features = random_features(drafter, 2, 9)
    ids = torch.arange(0, VOCAB, 2)  # 31 of 61: under MIN_SIZE, so set directly (as in the fast-draft test)
    outs = []
    for restrict in (False, True):
        if restrict:
            drafter.vocab_ids, drafter.vocab_head = ids, head.weight[ids].contiguous()
        ctx = drafter.new_context(2, 24)
        drafter.append_context(ctx, features, torch.tensor([9, 5]))
        outs.append(drafter.draft(ctx, torch.tensor([3, 8]), embed, head))
    full, restricted = outs
    assert_close("logits on the vocabulary", full.logits[..., ids], restricted.logits[..., ids], 1e-5)
    assert torch.equal(full.hidden, restricted.hidden)
    others = torch.tensor([i for i in range(VOCAB) if i % 2])
    assert torch.isneginf(restricted.logits[..., others]).all()
    drafter.restrict_vocab(None, head)
    assert drafter.vocab_ids is None and drafter.vocab_head is None


def tiny_llm(**kwargs) -> weaver.LLM:
    cfg = preset_config("tiny-llama", vocab_size=300, eos_token_id=[])
    return weaver.LLM.from_config(cfg, drafter="random:1", adapter="random", device="cpu", dtype="fp32", **kwargs)


@pytest.mark.parametrize("method", ["chain", "ddtree", "weaver"])
def test_greedy_with_a_draft_vocabulary_equals_ar(tmp_path, method):
    """Lossless with a token map, and the drafts stay inside it (the root's tree holds only mapped tokens)."""
    ids = torch.arange(0, 300, 2)[:128]
    save_token_map(tmp_path / "map.safetensors", ids, 300)
    llm = tiny_llm(draft_vocab=str(tmp_path / "map.safetensors"))
    assert torch.equal(llm.drafter.vocab_ids, ids)
    prompt = [5, 17, 3, 99, 42, 7, 250]
    ar = llm.generate(prompt, method="ar", max_new_tokens=40, temperature=0.0)
    out = llm.generate(prompt, method=method, budget=16, max_new_tokens=40, temperature=0.0)
    assert out.token_ids == ar.token_ids
    sampled = llm.generate(prompt, method=method, budget=16, max_new_tokens=24, temperature=1.0, seed=2)
    assert len(sampled.token_ids) == 24 and all(0 <= t < 300 for t in sampled.token_ids)


def test_set_draft_vocab_after_decoding_starts_a_new_engine():
    llm = tiny_llm()
    prompt = [5, 17, 3, 99, 42, 7, 250]
    ar = llm.generate(prompt, method="ar", max_new_tokens=24, temperature=0.0)
    before = llm.generate(prompt, method="weaver", budget=16, max_new_tokens=24, temperature=0.0)
    old = llm.engine
    llm.engine.min_capacity = 64
    llm.set_draft_vocab("first:100")
    assert llm.engine is not old and llm.engine.min_capacity == 64 and llm.drafter.vocab_ids.numel() == 100
    after = llm.generate(prompt, method="weaver", budget=16, max_new_tokens=24, temperature=0.0)
    assert before.token_ids == after.token_ids == ar.token_ids
    llm.set_draft_vocab(None)
    assert llm.drafter.vocab_ids is None


def test_draft_vocab_errors(tmp_path, capsys):
    with pytest.raises(GenerationConfigError, match="no drafter"):
        weaver.LLM.from_config(preset_config("tiny-llama", vocab_size=300, eos_token_id=[]), device="cpu",
                               dtype="fp32", draft_vocab="first:64")  # fmt: skip
    with pytest.raises(GenerationConfigError, match="32..300"):
        tiny_llm(draft_vocab="first:8")
    code = cli_main(
        [
            "generate",
            "hi",
            "--model",
            "tiny-llama",
            "--random-weights",
            "--drafter",
            "random",
            "--draft-vocab",
            str(tmp_path / "nope.safetensors"),
            "--method",
            "chain",
        ]
    )
    assert code == 2
    err = capsys.readouterr().err
    assert "no such token map" in err and "Traceback" not in err


def test_count_tokens_in_chunks_equals_one_bincount():
    gen = torch.Generator().manual_seed(3)
    seqs = [torch.randint(0, 50, (int(n),), generator=gen) for n in torch.randint(0, 9, (40,), generator=gen)]
    want = torch.bincount(torch.cat(seqs), minlength=50)
    for chunk in (1, 7, 1 << 20):  # a flush per sequence, across sequences, and once at the end
        assert torch.equal(count_tokens([s.tolist() for s in seqs], 50, chunk=chunk), want)
