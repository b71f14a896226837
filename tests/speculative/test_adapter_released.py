"""The authors' released Weaver checkpoint (`.pth`, both layouts) loaded by weaver, against the released forward
re-implemented here from `reference/checkpoint-formats.md` §3 (plain torch in float64, no weaver code in the math).

The reference, per batch row: norms `x * rsqrt(mean(x^2) + 1e-6) * w + b`; prefix rows proposal_in(output_norm(h))
for h_tgt, h_1..h_D, attending causally; tree nodes token_in(embed_norm(E[x])) seeing the prefix, their ancestors
and themselves; pre-norm blocks with RoPE (rotate-half, whole head_dim; prefix row j at j, a node at depth t at
min(t, D - 1) + 1) and SwiGLU `down(silu(gate) * up)`, or the older layout's pos_emb and GELU fc1/fc2; score
prior + R[c] . out_norm(y) with R = W_lm @ lm_head_query_in.weight, candidate ids < 0 masked.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
from helpers.adapters import TORCH, TRITON
from helpers.trees import assert_same_tree
from helpers.triton_env import DEVICE  # sets TRITON_INTERPRET before triton loads

from weaver.cli import main
from weaver.errors import CheckpointError
from weaver.llm import _load_adapter
from weaver.models.config import ModelConfig
from weaver.speculative.builders.weaver import build_weaver, build_weaver_reference
from weaver.speculative.weaver import WeaverAdapter
from weaver.testing import assert_close

HT, D_RANK, HEADS, MLP, K_DEPTH, POOL, VOCAB = 24, 16, 2, 20, 4, 5, 13
LAYOUTS = ["released", "older"]


# ---------------------------------------------------------------- a tiny checkpoint in the authors' layout
def make_checkpoint(layout: str, *, layers: int = 1, seed: int = 0, dtype: torch.dtype = torch.float32,
                    **config: object) -> dict:  # fmt: skip
    """{"config", "state_dict"} with the reference's keys and shapes, random tensors (norms near 1)."""
    gen = torch.Generator().manual_seed(seed)
    shapes = {
        "output_norm.weight": [HT], "output_norm.bias": [HT], "embed_norm.weight": [HT], "embed_norm.bias": [HT],
        "proposal_in.weight": [D_RANK, HT], "proposal_in.bias": [D_RANK],
        "token_in.weight": [D_RANK, HT], "token_in.bias": [D_RANK],
        "out_norm.weight": [D_RANK], "out_norm.bias": [D_RANK], "lm_head_query_in.weight": [HT, D_RANK],
    }  # fmt: skip
    for i in range(layers):
        p = f"blocks.{i}."
        shapes |= {p + "norm_attn.weight": [D_RANK], p + "norm_attn.bias": [D_RANK], p + "norm_mlp.weight": [D_RANK],
                   p + "norm_mlp.bias": [D_RANK], p + "qkv_proj.weight": [3 * D_RANK, D_RANK],
                   p + "o_proj.weight": [D_RANK, D_RANK]}  # fmt: skip
        if layout == "released":
            shapes |= {p + "gate_up_proj.weight": [2 * MLP, D_RANK], p + "gate_up_proj.bias": [2 * MLP],
                       p + "down_proj.weight": [D_RANK, MLP], p + "down_proj.bias": [D_RANK]}  # fmt: skip
        else:
            shapes |= {p + "fc1.weight": [MLP, D_RANK], p + "fc1.bias": [MLP], p + "fc2.weight": [D_RANK, MLP],
                       p + "fc2.bias": [D_RANK]}  # fmt: skip
    if layout == "older":
        shapes["pos_emb"] = [K_DEPTH, D_RANK]
    sd = {}
    for name, shape in shapes.items():
        noise = torch.randn(shape, generator=gen)
        if name == "pos_emb":
            sd[name] = noise
        elif len(shape) == 2:
            sd[name] = noise / math.sqrt(shape[1])
        else:
            is_norm_weight = "norm" in name and name.endswith(".weight")
            sd[name] = 1.0 + 0.1 * noise if is_norm_weight else 0.1 * noise
    cfg = {"d_model": HT, "d_embed": HT, "d_rank": D_RANK, "num_heads": HEADS, "num_layers": layers, "mlp_dim": MLP,
           "K": K_DEPTH, "candidate_pool_size": POOL, "encoder_mode": 3, "score_head": 4}  # fmt: skip
    if layout == "released":
        cfg |= {"activation": "swiglu", "rope_base": 10000.0}
    return {"config": {**cfg, **config}, "state_dict": {k: v.to(dtype) for k, v in sd.items()}}


def make_round(batch: int, depth: int, seed: int = 1) -> dict[str, torch.Tensor]:
    """Target embedding / LM head, hiddens, drafter logits and roots of one round."""
    gen = torch.Generator().manual_seed(seed)
    return {
        "embed": torch.randn(VOCAB, HT, generator=gen),
        "lm_head": torch.randn(VOCAB, HT, generator=gen) * 0.3,
        "target_hidden": torch.randn(batch, HT, generator=gen) * 3.0,
        "draft_hidden": torch.randn(batch, depth, HT, generator=gen) * 3.0,
        "marginals": torch.randn(batch, depth, VOCAB, generator=gen) * 2.0,
        "root": torch.randint(0, VOCAB, (batch,), generator=gen),
    }


# ---------------------------------------------------------------- the released forward, from the reference text
def _norm(x, sd, name):
    x = x.double()
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * sd[name + ".weight"].double() \
        + sd[name + ".bias"].double()  # fmt: skip


def _linear(x, sd, name):
    y = x @ sd[name + ".weight"].double().T
    return y + sd[name + ".bias"].double() if name + ".bias" in sd else y


def _rotate(x, pos, base):
    """Rotate-half RoPE over the whole head_dim: x [N, H, hd] at integer positions pos [N]."""
    hd = x.shape[-1]
    inv = base ** (-torch.arange(0, hd, 2, dtype=torch.float64) / hd)
    ang = pos.double()[:, None] * inv  # [N, hd / 2]
    cos, sin = torch.cat([ang.cos()] * 2, -1)[:, None], torch.cat([ang.sin()] * 2, -1)[:, None]
    x1, x2 = x[..., : hd // 2], x[..., hd // 2 :]
    return x * cos + torch.cat([-x2, x1], -1) * sin


@torch.no_grad()
def released_scores(ckpt: dict, rnd: dict, b: int, tokens: list[int], parents: list[int], ids: torch.Tensor,
                    prior: torch.Tensor) -> torch.Tensor:  # fmt: skip
    """Pool logits [N, K] of every node of one tree of row b (node n scores pool min(depth, D - 1)); ids, prior
    [D, K] the row's pools."""
    cfg, sd = ckpt["config"], ckpt["state_dict"]
    rope = "blocks.0.gate_up_proj.weight" in sd
    d, n = rnd["draft_hidden"].shape[1], len(tokens)
    depth = [0] * n
    for i in range(1, n):
        depth[i] = depth[parents[i]] + 1
    h = torch.cat([rnd["target_hidden"][b : b + 1], rnd["draft_hidden"][b]])  # [1 + D, Ht]
    prefix = _linear(_norm(h, sd, "output_norm"), sd, "proposal_in")
    nodes = _linear(_norm(rnd["embed"][tokens], sd, "embed_norm"), sd, "token_in")
    if not rope:  # older: pos_emb rows (drafter row j: j - 1; node at depth t: min(t, K - 1))
        prefix = prefix + torch.cat([torch.zeros(1, prefix.shape[1]), sd["pos_emb"][:d].double()])
        nodes = nodes + sd["pos_emb"].double()[[min(t, cfg["K"] - 1) for t in depth]]
    x = torch.cat([prefix, nodes])  # [P + N, d_rank]
    p = d + 1
    pos = torch.tensor(list(range(p)) + [min(t, d - 1) + 1 for t in depth])
    sees = torch.zeros(p + n, p + n, dtype=torch.bool)
    sees[:p, :p] = torch.ones(p, p, dtype=torch.bool).tril()
    sees[p:, :p] = True
    for i in range(n):
        j = i
        while j >= 0:
            sees[p + i, p + j] = True
            j = parents[j]
    heads, hd = cfg["num_heads"], cfg["d_rank"] // cfg["num_heads"]
    for i in range(cfg["num_layers"]):
        blk = f"blocks.{i}."
        q, k, v = _linear(_norm(x, sd, blk + "norm_attn"), sd, blk + "qkv_proj").view(-1, 3, heads, hd).unbind(1)
        if rope:
            q, k = _rotate(q, pos, cfg["rope_base"]), _rotate(k, pos, cfg["rope_base"])
        att = torch.einsum("ihd,jhd->hij", q, k) / math.sqrt(hd)
        att = torch.softmax(att.masked_fill(~sees, float("-inf")), -1)
        x = x + _linear(torch.einsum("hij,jhd->ihd", att, v).reshape(-1, heads * hd), sd, blk + "o_proj")
        m = _norm(x, sd, blk + "norm_mlp")
        if rope:
            gate, up = _linear(m, sd, blk + "gate_up_proj").split(cfg["mlp_dim"], -1)
            x = x + _linear(gate * torch.sigmoid(gate) * up, sd, blk + "down_proj")
        else:
            x = x + _linear(torch.nn.functional.gelu(_linear(m, sd, blk + "fc1")), sd, blk + "fc2")
    r = rnd["lm_head"].double() @ sd["lm_head_query_in.weight"].double()  # [V, d_rank]
    y = _norm(x[p:], sd, "out_norm")  # [N, d_rank]
    pool = [min(t, d - 1) for t in depth]
    cand = ids[pool]  # [N, K]
    logits = prior[pool].double() + (r[cand.clamp(min=0)] * y[:, None]).sum(-1)
    return logits.masked_fill(cand < 0, float("-inf"))


def assert_logits(what: str, want: torch.Tensor, got: torch.Tensor, tol: float = 1e-5) -> None:
    """The same -inf (masked candidates) and, elsewhere, equal values."""
    assert torch.equal(torch.isinf(want), torch.isinf(got.cpu())), what
    finite = torch.isfinite(want)
    assert_close(what, want[finite], got.cpu()[finite], tol)


def _pools(rnd: dict, k: int = POOL) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-k pools of the drafter logits, with one padded candidate (id -1) in row 0's pool 1 and row 1's pool 0."""
    prior, ids = torch.topk(rnd["marginals"], k, dim=-1)
    ids[0, 1, 2] = -1
    ids[-1, 0, k - 1] = -1
    return prior, ids


def _bound(ckpt: dict, rnd: dict, options=TORCH) -> WeaverAdapter:
    ad = WeaverAdapter.from_released(ckpt, HT)
    ad.bind(rnd["embed"], rnd["lm_head"], options=options)
    return ad


# ---------------------------------------------------------------- scores
@pytest.mark.parametrize("layers", [1, 2])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_forward_matches_the_released_math(layout: str, layers: int) -> None:
    """The teacher-forced forward (a chain: root, x_1, ...) scores what the reference does, ids < 0 masked."""
    ckpt = make_checkpoint(layout, layers=layers, seed=layers)
    rnd = make_round(2, 4, seed=3)
    ad = _bound(ckpt, rnd)
    assert ad.config.positions == ("rope" if layout == "released" else "learned")
    prior, ids = _pools(rnd)
    tokens = torch.tensor([[int(rnd["root"][0]), 3, 7, 1], [int(rnd["root"][1]), 0, 0, 12]])
    got = ad(rnd["target_hidden"], rnd["draft_hidden"], tokens, ids, prior)  # [B, T, K]
    for b in range(2):
        want = released_scores(ckpt, rnd, b, tokens[b].tolist(), [-1, 0, 1, 2], ids[b], prior[b])
        assert_logits(f"{layout} row {b}", want, got[b])


@pytest.mark.parametrize(("layout", "layers", "options"), [("released", 1, TORCH), ("released", 2, TORCH),
                                                           ("older", 2, TORCH), ("released", 2, TRITON)])  # fmt: skip
def test_tree_step_matches_the_released_math(layout: str, layers: int, options) -> None:
    """Two trees grown by `step` in batches of 3 (with padding lanes), against the reference over the whole tree;
    with kernels="triton" the kernels and the candidate table (q / k stored rotated) run, interpreted."""
    ckpt = make_checkpoint(layout, layers=layers, seed=5)
    depth = 3
    rnd = make_round(2, depth, seed=4)
    dev = DEVICE if options is TRITON else "cpu"  # the kernels: interpreted on CPU, compiled with --triton-full
    ad = _bound(ckpt, {k: v.to(dev) for k, v in rnd.items()}, options).to(dev)
    prior, ids = _pools(rnd)
    # row 0: a bushy tree; row 1 reaches depth D (its deepest node scores the clamped pool D - 1)
    parents = [[-1, 0, 0, 1, 1, 2, 3], [-1, 0, 1, 2, 0]]
    gen = torch.Generator().manual_seed(7)
    depth_of = [[0] * len(p) for p in parents]
    tokens, cands = [], []
    for b, par in enumerate(parents):
        toks, cs = [int(rnd["root"][b])], [0]
        for i in range(1, len(par)):
            depth_of[b][i] = depth_of[b][par[i]] + 1
            pool = min(depth_of[b][i], depth) - 1  # a node at depth t is a candidate of pool t - 1
            j = int(torch.randint(0, POOL, (1,), generator=gen))
            j = j if int(ids[b, pool, j]) >= 0 else (j + 1) % POOL
            toks.append(int(ids[b, pool, j]))
            cs.append(1 + pool * POOL + j)
        tokens.append(toks)
        cands.append(cs)
    w, n = 3, 7
    state = ad.begin_round(*(t.to(dev) for t in (rnd["target_hidden"], rnd["draft_hidden"], ids, prior)),
                           capacity=n + w, root=rnd["root"].to(dev))  # fmt: skip
    assert (state.cand_x is not None) == (options is TRITON)
    schedule = [([0], [0]), ([1, 2], [1, 4]), ([3, 4, 5], [2]), ([6], [3])]
    got = {}
    for batch in schedule:
        f = torch.zeros(5, 2, w, dtype=torch.long)
        f[0], f[2] = n + torch.arange(w), -1
        for b, sel in enumerate(batch):
            for lane, i in enumerate(sel):
                f[:, b, lane] = torch.tensor([i, tokens[b][i], parents[b][i], depth_of[b][i], cands[b][i]])
        logp = ad.step(state, *f.to(dev))
        for b, sel in enumerate(batch):
            for lane, i in enumerate(sel):
                got[b, i] = logp[b, lane]
    for b in range(2):
        want = torch.log_softmax(released_scores(ckpt, rnd, b, tokens[b], parents[b], ids[b], prior[b]), -1)
        for i in range(len(parents[b])):
            assert_logits(f"{layout} L{layers} {options.kernels} row {b} node {i}", want[i], got[b, i])


def test_device_builder_gives_the_reference_trees() -> None:
    """`build_weaver` with the Triton loop (interpreted: frontier pop + node inputs, attention, the SwiGLU finish,
    the scoring tail with the push) builds the host reference's trees for the released variant, 1 and 2 blocks."""
    for layers, budget, w, c in ((1, 12, 2, 3), (2, 8, 3, 2)):
        ckpt = make_checkpoint("released", layers=layers, seed=layers + 10)
        rnd = {k: v.to(DEVICE) for k, v in make_round(2, 4, seed=layers).items()}
        args = (rnd["root"], rnd["marginals"], budget)
        kw = {"target_hidden": rnd["target_hidden"], "draft_hidden": rnd["draft_hidden"], "w": w, "c": c}
        fused = build_weaver(*args, adapter=_bound(ckpt, rnd, TRITON).to(DEVICE), options=TRITON, **kw)
        plain = build_weaver_reference(*args, adapter=_bound(ckpt, rnd, TORCH).to(DEVICE), **kw)
        assert fused.size > 1
        assert_same_tree(plain, fused, f"released L{layers} budget {budget} w {w} c {c}")


# ---------------------------------------------------------------- loading
def test_pth_file_loads_with_its_dtype(tmp_path) -> None:
    """A `.pth` path reads with weights_only; the stored dtype is kept unless `dtype` is given; save/load of our
    directory format keeps the variant."""
    ckpt = make_checkpoint("released", dtype=torch.bfloat16, rope_base=500.0)
    torch.save(ckpt, tmp_path / "w.pth")
    ad = WeaverAdapter.from_released(tmp_path / "w.pth", ModelConfig(vocab_size=VOCAB, hidden_size=HT))
    assert ad.proposal_in.weight.dtype == torch.bfloat16 and ad.rope_cos.dtype == torch.bfloat16
    assert (ad.config.positions, ad.config.mlp, ad.config.rope_base, ad.config.max_depth, ad.config.pool_size) == (
        "rope", "swiglu", 500.0, K_DEPTH, POOL)  # fmt: skip
    for name, t in ckpt["state_dict"].items():
        assert torch.equal(ad.state_dict()[name], t), name
    as_fp32 = WeaverAdapter.from_released(tmp_path / "w.pth", dtype=torch.float32)
    assert as_fp32.proposal_in.weight.dtype == torch.float32
    ad.save_pretrained(tmp_path / "dir")
    back = WeaverAdapter.from_pretrained(tmp_path / "dir")
    assert back.config == ad.config


CASES = [
    ("encoder_mode", lambda c: c["config"].update(encoder_mode=2), "encoder_mode=2 is not supported"),
    ("score_head", lambda c: c["config"].update(score_head=1), "score_head=1 is not supported"),
    ("activation", lambda c: c["config"].update(activation="gelu"), "activation='gelu' is not supported"),
    ("missing key", lambda c: c["state_dict"].pop("out_norm.bias"), r"missing keys \['out_norm.bias'\]"),
    ("unexpected key", lambda c: c["state_dict"].update(extra=torch.zeros(1)), r"unexpected keys \['extra'\]"),
    ("shape", lambda c: c["state_dict"].update({"token_in.bias": torch.zeros(3)}), "has shape"),
    ("d_embed", lambda c: c["config"].update(d_embed=HT + 8), "d_model=24 != d_embed=32"),
    ("no layout", lambda c: c["state_dict"].pop("blocks.0.gate_up_proj.weight"), "neither the released layout"),
    ("config", lambda c: c["config"].pop("K"), r"config lacks \['K'\]"),
    ("odd head_dim", lambda c: c["config"].update(num_heads=16), "even head_dim"),
]


@pytest.mark.parametrize(("mutate", "message"), [pytest.param(m, s, id=i) for i, m, s in CASES])
def test_bad_checkpoints_are_one_line_errors(mutate, message) -> None:
    ckpt = make_checkpoint("released")
    mutate(ckpt)
    with pytest.raises(CheckpointError, match=message) as err:
        WeaverAdapter.from_released(ckpt, HT)
    assert "\n" not in str(err.value)


def test_target_and_file_errors(tmp_path) -> None:
    with pytest.raises(CheckpointError, match="hidden size d_model=24, this target's is 32"):
        WeaverAdapter.from_released(make_checkpoint("older"), ModelConfig(vocab_size=VOCAB, hidden_size=32))
    with pytest.raises(CheckpointError, match="activation='swiglu' is not supported for the older layout"):
        WeaverAdapter.from_released(make_checkpoint("older", activation="swiglu"))
    with pytest.raises(CheckpointError, match="is not a file"):
        WeaverAdapter.from_released(tmp_path / "missing.pth")
    (tmp_path / "junk.pth").write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointError, match="cannot read") as err:
        WeaverAdapter.from_released(tmp_path / "junk.pth")
    assert "\n" not in str(err.value)
    torch.save({"weights": 1}, tmp_path / "other.pth")
    with pytest.raises(CheckpointError, match="'config' and 'state_dict'"):
        WeaverAdapter.from_released(tmp_path / "other.pth")


def test_convert_adapter_round_trip(tmp_path, capsys) -> None:
    """`weaver convert adapter IN.pth OUT_DIR` writes our directory format: the same weights, config and scores."""
    ckpt = make_checkpoint("released", layers=2)
    torch.save(ckpt, tmp_path / "w.pth")
    assert main(["convert", "adapter", str(tmp_path / "w.pth"), str(tmp_path / "out")]) == 0
    assert "rope positions, swiglu MLP" in capsys.readouterr().out
    rnd = make_round(1, 3)
    direct, converted = _bound(ckpt, rnd), WeaverAdapter.from_pretrained(tmp_path / "out")
    converted.bind(rnd["embed"], rnd["lm_head"], options=TORCH)
    assert converted.config == direct.config
    prior, ids = torch.topk(rnd["marginals"], POOL, dim=-1)
    args = (rnd["target_hidden"], rnd["draft_hidden"], torch.tensor([[1, 2, 3]]), ids, prior)
    assert torch.equal(direct(*args), converted(*args))
    assert main(["convert", "adapter", str(tmp_path / "nope.pth"), str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1


def test_llm_adapter_path_takes_a_pth(tmp_path) -> None:
    """`weaver.LLM(..., adapter=PATH)` loads a `.pth` file directly (checked against the target's hidden size)."""
    torch.save(make_checkpoint("released"), tmp_path / "w.pth")
    target = SimpleNamespace(config=ModelConfig(vocab_size=VOCAB, hidden_size=HT), device=torch.device("cpu"),
                             dtype=torch.float32)  # fmt: skip
    ad = _load_adapter(str(tmp_path / "w.pth"), target, seed=0)
    assert isinstance(ad, WeaverAdapter) and ad.config.mlp == "swiglu"
    target.config = ModelConfig(vocab_size=VOCAB, hidden_size=HT + 8)
    with pytest.raises(CheckpointError, match="this target's is 32"):
        _load_adapter(str(tmp_path / "w.pth"), target, seed=0)
