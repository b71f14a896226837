"""`weaver data token-map`: counts only reply tokens of regenerated shards, keeps EOS, writes a loadable map."""

from __future__ import annotations

import json

import torch

from weaver.cli import main as cli_main
from weaver.models.presets import preset_config
from weaver.speculative.draft_vocab import load_token_map
from weaver.train.shards import write_shard
from weaver.train.token_map import build_token_map, reply_tokens


def test_reply_tokens_skip_the_prompts(tmp_path):
    write_shard(tmp_path / "shard_00000.npz", [[1, 2, 3, 9, 9], [4, 5, 7]], prompt_lens=[3, 1])
    write_shard(tmp_path / "shard_00001.npz", [[6, 6, 8]], prompt_lens=[2])
    assert [r.tolist() for r in reply_tokens(tmp_path, progress=False)] == [[9, 9], [5, 7], [8]]


def test_build_token_map_keeps_the_most_frequent_and_eos(tmp_path):
    sequences = [[10] * 5 + [11] * 4 + [12] * 3] + [[t] for t in range(40, 80)]
    summary = build_token_map(tmp_path / "m.safetensors", 32, 300, sequences, always=[299])
    ids = load_token_map(tmp_path / "m.safetensors", 300).tolist()
    assert {10, 11, 12, 299} <= set(ids) and len(ids) == 32
    assert summary["tokens_counted"] == 12 + 40
    assert abs(summary["coverage"] - (12 + 28) / 52) < 1e-12  # 10, 11, 12 and 28 of the 40 singletons


def test_token_map_command(tmp_path, capsys):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(preset_config("tiny-llama", vocab_size=300, eos_token_id=299)))
    data = tmp_path / "regen"
    data.mkdir()
    write_shard(data / "shard_00000.npz", [[1, 2, 3, 4, 4, 4, 5]], prompt_lens=[3])
    out = tmp_path / "map.safetensors"
    code = cli_main(["data", "token-map", "--data", str(data), "--model", str(model), "--size", "40",
                     "--out", str(out), "--quiet"])  # fmt: skip
    assert code == 0
    ids = load_token_map(out, 300)
    assert {4, 5, 299} <= set(ids.tolist()) and ids.numel() == 40 and torch.all(ids[1:] > ids[:-1])
    capsys.readouterr()
    code = cli_main(["data", "token-map", "--model", str(model), "--size", "40", "--out", str(out)])
    assert code == 2 and "exactly one of --data" in capsys.readouterr().err
