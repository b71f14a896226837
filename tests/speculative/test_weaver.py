"""Weaver adapter and the weaver builder, against explicit references (DESIGN §7, §8).

The reference scores one root path at a time with hand-written math: the prefix rows and the path's
nodes form one causal sequence (prefix causal, a node sees every prefix row, its ancestors and itself),
attention is an explicit masked softmax, and pool logits use the full-vocabulary projection
W_lm @ lm_head_query_in(out_norm(y)), all in float64.
"""

from __future__ import annotations

import json
import math

import pytest
import torch
from helpers.adapters import HT, TORCH, TRITON, bound, make_adapter, make_inputs
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

from weaver.errors import CheckpointError, GenerationConfigError
from weaver.ops.weaver_frontier import rotate_qk
from weaver.options import RuntimeOptions
from weaver.speculative.builders import get_builder, trie_size
from weaver.speculative.builders.weaver import build_weaver, build_weaver_reference
from weaver.speculative.tree import DraftTree
from weaver.speculative.weaver import WeaverAdapter, WeaverConfig
from weaver.testing import assert_close

WEAVERS = [pytest.param(build_weaver_reference, id="reference"), pytest.param(build_weaver, id="device")]


# ---------------------------------------------------------------- reference (one row, one path, float64)
def ref_norm(x: torch.Tensor, norm) -> torch.Tensor:
    y = x / torch.sqrt((x * x).mean(-1, keepdim=True) + norm.eps) * norm.weight.double()
    return y + norm.bias.double() if norm.bias is not None else y


def ref_linear(x: torch.Tensor, lin) -> torch.Tensor:
    y = x @ lin.weight.double().T
    return y + lin.bias.double() if lin.bias is not None else y


@torch.no_grad()
def ref_path_logprobs(ad: WeaverAdapter, inp: dict, b: int, path: list[int], k: int) -> torch.Tensor:
    """log p_weaver over pool t+1 for each node t of `path` (root first) in row b: [len(path), K]."""
    cfg = ad.config
    depth = min(inp["draft_hidden"].shape[1], cfg.max_depth)
    prior, ids = torch.topk(inp["marginals"][b, :depth].double(), k, dim=-1)  # [D', K]
    pos = ad.pos_emb.double()
    rows = [ref_linear(ref_norm(inp["target_hidden"][b].double(), ad.output_norm), ad.proposal_in)]
    for d in range(depth):  # h_{d+1} takes pos row d
        rows.append(ref_linear(ref_norm(inp["draft_hidden"][b, d].double(), ad.output_norm), ad.proposal_in) + pos[d])
    for t, tok in enumerate(path):  # a node at depth t takes pos row t
        rows.append(ref_linear(ref_norm(inp["embed"][tok].double(), ad.embed_norm), ad.token_in) + pos[t])
    x = torch.stack(rows)  # [P + T, d]
    n, hd = x.shape[0], cfg.head_dim
    for blk in ad.blocks:
        qkv = ref_linear(ref_norm(x, blk.norm_attn), blk.qkv_proj)
        q, kk, v = qkv.split(cfg.d_rank, dim=-1)
        heads = []
        for h in range(cfg.num_heads):
            sl = slice(h * hd, (h + 1) * hd)
            out = torch.zeros(n, hd, dtype=torch.float64)
            for i in range(n):  # row i sees rows 0..i: the prefix (causally), then its own root path
                s = kk[: i + 1, sl] @ q[i, sl] / math.sqrt(hd)
                out[i] = torch.softmax(s, 0) @ v[: i + 1, sl]
            heads.append(out)
        x = x + ref_linear(torch.cat(heads, -1), blk.o_proj)
        x = x + ref_linear(torch.nn.functional.gelu(ref_linear(ref_norm(x, blk.norm_mlp), blk.fc1)), blk.fc2)
    y = x[n - len(path) :]
    query = ref_linear(ref_norm(y, ad.out_norm), ad.lm_head_query_in)  # [T, Ht]
    full = query @ inp["lm_head"].double().T  # [T, V]: the full projection, reference only
    t = len(path)
    return torch.log_softmax(prior[:t] + full.gather(1, ids[:t]), dim=-1)


def path_to(tree: DraftTree, b: int, i: int) -> list[int]:
    """Tokens root..i of node i in row b."""
    par, tok, out = tree.parents[b].tolist(), tree.tokens[b].tolist(), []
    while i >= 0:
        out.append(tok[i])
        i = par[i]
    return out[::-1]


# ---------------------------------------------------------------- adapter
@pytest.mark.parametrize("layers,bias", [(1, True), (2, False)], ids=["L1-bias", "L2-nobias"])
def test_batched_step_equals_reference(layers: int, bias: bool) -> None:
    """Nodes of two different trees added in batches of w = 3 (with padding entries), vs each path alone."""
    vocab, depth, k = 11, 4, 5
    inp = make_inputs(2, depth, vocab)
    ad = bound(make_adapter(vocab, layers=layers, bias=bias), inp)
    parents = [[-1, 0, 0, 1, 1, 2, 3, 4, 5, 0], [-1, 0, 1, 2, 3, 0, 5, 1]]  # row 1 reaches depth 4
    gen = torch.Generator().manual_seed(5)
    tokens = [
        [int(inp["root"][b])] + torch.randint(0, vocab, (len(p) - 1,), generator=gen).tolist()
        for b, p in enumerate(parents)
    ]
    dep = [[0] * len(p) for p in parents]
    for b, p in enumerate(parents):
        for i in range(1, len(p)):
            dep[b][i] = dep[b][p[i]] + 1
    prior, ids = torch.topk(inp["marginals"], k, dim=-1)
    w, n = 3, 10
    state = ad.begin_round(inp["target_hidden"], inp["draft_hidden"], ids, prior, capacity=n + w)
    # batches: node sets whose parents are already in (row 0 / row 1)
    schedule = [([0], [0]), ([1, 2, 9], [1, 5]), ([3, 4, 5], [2, 6]), ([6, 7, 8], [3, 7]), ([], [4])]
    got: dict[tuple[int, int], torch.Tensor] = {}
    for batch in schedule:
        fields = torch.zeros(4, 2, w, dtype=torch.long)
        fields[0], fields[2] = n + torch.arange(w), -1  # padding entries: scratch slots, no parent
        for b, sel in enumerate(batch):
            for j, i in enumerate(sel):
                fields[:, b, j] = torch.tensor([i, tokens[b][i], parents[b][i], dep[b][i]])
        logp = ad.step(state, *fields)
        assert logp.shape == (2, w, k)
        for b, sel in enumerate(batch):
            for j, i in enumerate(sel):
                got[b, i] = logp[b, j]
    assert len(got) == sum(len(p) for p in parents)
    for (b, i), lp in got.items():
        if dep[b][i] < depth:  # a node at depth D has no pool to score
            path, j = [], i
            while j >= 0:
                path.append(tokens[b][j])
                j = parents[b][j]
            assert_close(f"row {b} node {i}", ref_path_logprobs(ad, inp, b, path[::-1], k)[-1], lp, 1e-5)


def test_forward_chain_equals_reference() -> None:
    vocab, depth, k = 11, 4, 5
    inp = make_inputs(2, depth, vocab, seed=3)
    ad = bound(make_adapter(vocab, layers=2), inp)
    prior, ids = torch.topk(inp["marginals"], k, dim=-1)
    tokens = torch.tensor([[int(inp["root"][0]), 3, 7, 1], [int(inp["root"][1]), 0, 0, 10]])
    logits = ad(inp["target_hidden"], inp["draft_hidden"], tokens, ids, prior)  # [B, T, K]
    for b in range(2):
        ref = ref_path_logprobs(ad, inp, b, tokens[b].tolist(), k)
        assert_close(f"row {b}", ref, torch.log_softmax(logits[b], -1), 1e-5)


class _ShapeLog(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.shapes: list[tuple[str, tuple[int, ...]]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in pytree.tree_leaves(out):
            if isinstance(t, torch.Tensor):
                self.shapes.append((str(func), tuple(t.shape)))
        return out


def test_pool_scoring_equals_full_vocab_formula_without_projecting_it() -> None:
    vocab, depth, k = 37, 3, 5  # V = 37 matches no other dimension
    inp = make_inputs(2, depth, vocab, seed=4)
    ad = bound(make_adapter(vocab, max_depth=3), inp)
    y = torch.randn(2, 3, 16, generator=torch.Generator().manual_seed(0))
    prior, ids = torch.topk(inp["marginals"], k, dim=-1)  # [B, D, K]
    got = ad.score_pool(y, ids, prior)  # [B, 3, K]: y[:, j] scores pool j
    query = ref_linear(ref_norm(y.double(), ad.out_norm), ad.lm_head_query_in)  # [B, 3, Ht]
    full = query @ inp["lm_head"].double().T  # [B, 3, V]
    assert_close("pool logits", prior.double() + full.gather(-1, ids), got, 1e-5)
    # bind computed R = W_lm @ lm_head_query_in.weight; a step never makes a tensor with a V-sized dim
    state = ad.begin_round(inp["target_hidden"], inp["draft_hidden"], ids, prior, capacity=6)
    with _ShapeLog() as log:
        ad.step(
            state,
            *(
                torch.tensor([[0], [0]]),
                inp["root"][:, None],
                torch.tensor([[-1], [-1]]),
                torch.zeros(2, 1, dtype=torch.long),
            ),
        )
    assert log.shapes and not [s for s in log.shapes if vocab in s[1]], log.shapes


def test_bind_checks_shapes() -> None:
    ad = make_adapter(11)
    good = torch.zeros(11, HT)
    with pytest.raises(ValueError, match=r"embed_weight must be \[V, target_hidden=24\], got shape \(11, 23\)"):
        ad.bind(torch.zeros(11, HT - 1), good)
    with pytest.raises(ValueError, match="lm_head_weight must be"):
        ad.bind(good, torch.zeros(11 * HT))
    with pytest.raises(ValueError, match="embed_weight has 11 rows but lm_head_weight has 12"):
        ad.bind(good, torch.zeros(12, HT))
    with pytest.raises(RuntimeError, match="bind"):
        ad.score_pool(torch.zeros(16), torch.zeros(5, dtype=torch.long), torch.zeros(5))
    ad.bind(good, torch.randn(11, HT))
    assert ad.is_bound and ad.residual_lm_head.shape == (11, 16)
    assert "residual_lm_head" not in ad.state_dict()


def test_random_is_deterministic() -> None:
    a, b, c = make_adapter(seed=0), make_adapter(seed=0), make_adapter(seed=1)
    for (name, x), y, z in zip(a.state_dict().items(), b.state_dict().values(), c.state_dict().values()):
        assert torch.equal(x, y), name
        assert not torch.equal(x, z), name


@pytest.mark.parametrize("shard_bytes", [None, 4096])
def test_save_load_round_trip(tmp_path, shard_bytes: int | None) -> None:
    vocab, depth = 11, 4
    inp = make_inputs(1, depth, vocab)
    ad = bound(make_adapter(vocab, layers=2, bias=False), inp)
    ad.save_pretrained(tmp_path / "w", max_shard_bytes=shard_bytes)
    shards = sorted((tmp_path / "w").glob("*.safetensors"))
    assert (len(shards) > 1) == (shard_bytes is not None), shards
    if shard_bytes is not None:  # every shard within the limit, give or take its header
        assert all(p.stat().st_size < shard_bytes + 1024 for p in shards), [p.stat().st_size for p in shards]
    back = WeaverAdapter.from_pretrained(tmp_path / "w")
    assert back.config == ad.config
    for (name, x), y in zip(ad.state_dict().items(), back.state_dict().values()):
        assert torch.equal(x, y), name
    bound(back, inp)
    prior, ids = torch.topk(inp["marginals"], 5, dim=-1)
    tokens = torch.tensor([[2, 4, 6]])
    args = (inp["target_hidden"], inp["draft_hidden"], tokens, ids, prior)
    assert torch.equal(ad(*args), back(*args))


def test_from_pretrained_errors(tmp_path) -> None:
    with pytest.raises(CheckpointError, match="does not exist"):
        WeaverAdapter.from_pretrained(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(CheckpointError, match="no config.json"):
        WeaverAdapter.from_pretrained(tmp_path / "empty")
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "config.json").write_text("{nope")
    with pytest.raises(CheckpointError, match="not valid JSON"):
        WeaverAdapter.from_pretrained(bad)
    ad = make_adapter()
    ad.save_pretrained(tmp_path / "ok")
    cfg = json.loads((tmp_path / "ok" / "config.json").read_text())
    (tmp_path / "ok" / "config.json").write_text(json.dumps({**cfg, "d_rank": 32, "num_heads": 2}))
    with pytest.raises(CheckpointError, match="has shape"):
        WeaverAdapter.from_pretrained(tmp_path / "ok")
    (tmp_path / "ok" / "config.json").write_text(json.dumps({**cfg, "d_rank": 15}))
    with pytest.raises(CheckpointError, match="not a multiple"):
        WeaverAdapter.from_pretrained(tmp_path / "ok")
    (tmp_path / "ok" / "config.json").write_text(json.dumps(cfg))
    (tmp_path / "ok" / "model.safetensors").unlink()
    with pytest.raises(CheckpointError, match=r"no \*\.safetensors weights"):
        WeaverAdapter.from_pretrained(tmp_path / "ok")


def test_config_validation() -> None:
    with pytest.raises(ValueError, match="d_rank"):
        WeaverConfig(target_hidden=8, d_rank=0)
    with pytest.raises(ValueError, match="not a multiple"):
        WeaverConfig(target_hidden=8, d_rank=10, num_heads=3)
    with pytest.raises(ValueError, match=r"positions must be one of \['learned', 'rope'\], got 'alibi'"):
        WeaverConfig(target_hidden=8, positions="alibi")
    with pytest.raises(ValueError, match=r"mlp must be one of \['gelu', 'swiglu'\]"):
        WeaverConfig(target_hidden=8, mlp="relu")
    with pytest.raises(ValueError, match="even head_dim"):
        WeaverConfig(target_hidden=8, d_rank=6, num_heads=2, positions="rope")
    with pytest.raises(ValueError, match="rope_base"):
        WeaverConfig(target_hidden=8, rope_base=0)
    assert WeaverConfig(target_hidden=8, d_rank=6, num_heads=2, mlp="swiglu").head_dim == 3  # learned: any head_dim


def test_released_variant_saves_and_loads(tmp_path) -> None:
    """Our directory format keeps positions / mlp / rope_base; a config.json without them is the older variant."""
    inp = make_inputs(1, 3, 11)
    ad = bound(make_adapter(11, released=True), inp)
    assert not hasattr(ad, "pos_emb") and hasattr(ad.blocks[0], "gate_up_proj")
    ad.save_pretrained(tmp_path / "w")
    cfg = json.loads((tmp_path / "w" / "config.json").read_text())
    assert (cfg["positions"], cfg["mlp"], cfg["rope_base"]) == ("rope", "swiglu", 10000.0)
    back = bound(WeaverAdapter.from_pretrained(tmp_path / "w"), inp)
    prior, ids = torch.topk(inp["marginals"], 5, dim=-1)
    args = (inp["target_hidden"], inp["draft_hidden"], torch.tensor([[2, 4, 6]]), ids, prior)
    assert back.config == ad.config and torch.equal(ad(*args), back(*args))
    make_adapter(11).save_pretrained(tmp_path / "old")
    old = json.loads((tmp_path / "old" / "config.json").read_text())
    for key in ("positions", "mlp", "rope_base"):
        del old[key]
    (tmp_path / "old" / "config.json").write_text(json.dumps(old))
    assert WeaverAdapter.from_pretrained(tmp_path / "old").config.positions == "learned"


# ---------------------------------------------------------------- builder
@torch.no_grad()
def universe_scores(ad: WeaverAdapter, inp: dict, b: int, depth: int, k: int, c: int) -> dict[tuple, tuple]:
    """Every node reachable through top-c children: path (root excluded) -> (cumulative score, log p)."""
    out: dict[tuple, tuple] = {}
    root = int(inp["root"][b])
    _, ids = torch.topk(inp["marginals"][b, :depth], k, dim=-1)
    todo: list[tuple[tuple, float]] = [((), 0.0)]
    while todo:
        path, score = todo.pop()
        if len(path) == depth:
            continue
        lp = ref_path_logprobs(ad, inp, b, [root, *path], k)[-1]
        top = torch.topk(lp, c)
        for val, j in zip(top.values.tolist(), top.indices.tolist()):
            child = (*path, int(ids[len(path), j]))
            out[child] = (score + val, val)
            todo.append((child, score + val))
    return out


def tree_paths(tree: DraftTree, b: int) -> dict[tuple, float]:
    return {
        tuple(path_to(tree, b, i)[1:]): float(tree.draft_logprobs[b, i])
        for i in range(1, tree.size)
        if tree.valid[b, i]
    }


def prefix_closed_sets(paths: set[tuple], size: int):
    """Every prefix-closed set of `size` paths (each candidate taken or dropped for good: once each)."""

    def grow(chosen: list[tuple], cands: list[tuple]):
        if len(chosen) == size:
            yield chosen
            return
        if not cands:
            return
        head, rest = cands[0], cands[1:]
        yield from grow(chosen + [head], rest + [p for p in paths if len(p) == len(head) + 1 and p[:-1] == head])
        yield from grow(chosen, rest)

    yield from grow([], [p for p in paths if len(p) == 1])


@pytest.mark.parametrize("build", WEAVERS)
@pytest.mark.parametrize("c", [3, 2], ids=["c=K", "c<K"])
def test_w1_is_exact_best_first(c: int, build) -> None:
    vocab, depth, k = 5, 3, 3
    for seed in range(2):
        inp = make_inputs(1, depth, vocab, seed=10 + seed)
        ad = bound(make_adapter(vocab, max_depth=3, pool=k, seed=seed), inp)
        universe = universe_scores(ad, inp, 0, depth, k, c)
        for budget in range(1, 7):
            tree = build(
                inp["root"],
                inp["marginals"],
                budget,
                adapter=ad,
                w=1,
                c=c,
                target_hidden=inp["target_hidden"],
                draft_hidden=inp["draft_hidden"],
            )
            tree.validate()
            got = tree_paths(tree, 0)
            best = sorted(universe, key=lambda p: -universe[p][0])[:budget]
            assert set(got) == set(best), f"seed {seed} budget {budget}"
            # ... which is the prefix-closed set of `budget` nodes with the largest total score
            top = max(prefix_closed_sets(set(universe), budget), key=lambda s: sum(universe[p][0] for p in s))
            assert set(top) == set(got)
            for p, lp in got.items():
                assert abs(lp - universe[p][1]) < 1e-5, (p, lp, universe[p][1])


@pytest.mark.parametrize("build", WEAVERS)
@pytest.mark.parametrize("w", [3, 5, 20], ids=lambda w: f"w{w}")
def test_wide_expansion_gives_a_valid_tree(w: int, build) -> None:
    vocab, depth, k, c, budget = 11, 4, 5, 3, 20
    inp = make_inputs(1, depth + 2, vocab, seed=7)  # D = 6 > max_depth = 4
    ad = bound(make_adapter(vocab, max_depth=depth, pool=k), inp)
    calls = []
    step = ad.step
    ad.step = lambda *a: calls.append(1) or step(*a)  # count adapter calls
    tree = build(
        inp["root"],
        inp["marginals"],
        budget,
        adapter=ad,
        w=w,
        c=c,
        target_hidden=inp["target_hidden"],
        draft_hidden=inp["draft_hidden"],
    )
    tree.validate()  # topological, distinct siblings, depths consistent
    assert tree.size == budget + 1 and int(tree.num_nodes[0]) == budget + 1
    assert tree.max_depth() <= depth
    assert len(calls) <= 1 + math.ceil(budget / w) + depth
    ids = torch.topk(inp["marginals"][0], k, dim=-1).indices
    for i in range(1, tree.size):  # every node: a top-c pool candidate, draft_logprob = its conditional
        path = path_to(tree, 0, i)
        ref = ref_path_logprobs(ad, inp, 0, path[:-1], k)[-1]
        j = ids[len(path) - 2].tolist().index(path[-1])
        assert ref[j] >= torch.topk(ref, c).values[-1] - 1e-9
        assert abs(float(tree.draft_logprobs[0, i]) - float(ref[j])) < 1e-5


@pytest.mark.parametrize("build", WEAVERS)
def test_batch_rows_equal_single_rows(build) -> None:
    vocab, depth = 11, 4
    inp = make_inputs(2, depth, vocab, seed=8)
    ad = bound(make_adapter(vocab, max_depth=depth, pool=5), inp)
    kw = {"adapter": ad, "w": 2, "c": 3}
    both = build(
        inp["root"], inp["marginals"], 12, target_hidden=inp["target_hidden"], draft_hidden=inp["draft_hidden"], **kw
    )
    assert both.batch_size == 2
    for b in range(2):
        one = build(
            inp["root"][b : b + 1],
            inp["marginals"][b : b + 1],
            12,
            target_hidden=inp["target_hidden"][b : b + 1],
            draft_hidden=inp["draft_hidden"][b : b + 1],
            **kw,
        )
        for name in ("tokens", "parents", "depth", "valid"):
            assert torch.equal(getattr(both, name)[b], getattr(one, name)[0]), name
        assert_close(f"row {b}", one.draft_logprobs[0], both.draft_logprobs[b], 1e-6)
    assert not torch.equal(both.tokens[0, 1:], both.tokens[1, 1:])


@pytest.mark.parametrize("build", WEAVERS)
def test_small_universe_is_padded_and_edge_cases(build) -> None:
    vocab, depth = 5, 2
    inp = make_inputs(2, depth, vocab, seed=9)
    ad = bound(make_adapter(vocab, max_depth=depth, pool=2), inp)
    kw = {"adapter": ad, "target_hidden": inp["target_hidden"], "draft_hidden": inp["draft_hidden"]}
    tree = build(inp["root"], inp["marginals"], 50, **kw)  # K = 2: the whole trie has 2 + 4 nodes
    tree.validate()
    assert tree.size == 1 + trie_size(50, 2, 2) == 7 and tree.valid.all()
    root_only = build(inp["root"], inp["marginals"], 0, **kw)
    assert root_only.size == 1 and torch.equal(root_only.tokens[:, 0], inp["root"])
    assert get_builder("weaver") is build_weaver
    with pytest.raises(GenerationConfigError, match="adapter"):
        get_builder("weaver")(inp["root"], inp["marginals"], 4)
    with pytest.raises(GenerationConfigError, match="draft_hidden"):  # no `drafter_hidden` alias
        get_builder("weaver")(inp["root"], inp["marginals"], 4, adapter=ad, target_hidden=inp["target_hidden"],
                              drafter_hidden=inp["draft_hidden"])  # fmt: skip
    with pytest.raises(ValueError, match="w, c and pool_size"):
        build(inp["root"], inp["marginals"], 4, c=0, **kw)


@pytest.mark.parametrize("released", [False, True], ids=["learned", "released"])
def test_candidate_table_step_equals_computed_rows(monkeypatch, released: bool) -> None:
    """A step that gathers its nodes' rows from the candidate table (`cand`) scores, writes K/V and returns
    children exactly like one that computes them (RoPE: the vocabulary's rows by token, q / k rotated at the
    node's position as it reads them); the table exists where the adapter's kernels run (here
    kernels="triton") and within CANDIDATE_TABLE_MAX_BYTES (RoPE: VOCAB_TABLE_MAX_BYTES), else `cand` is ignored."""
    import weaver.speculative.weaver as weaver_module

    vocab, depth, k = 13, 3, 4
    inp = make_inputs(2, depth, vocab, seed=6)
    ad = bound(make_adapter(vocab, max_depth=depth, pool=k, layers=2, released=released), inp, TRITON)
    prior, ids = torch.topk(inp["marginals"], k, dim=-1)
    args = (inp["target_hidden"], inp["draft_hidden"], ids, prior)
    table = ad.begin_round(*args, capacity=8, root=inp["root"])
    plain = ad.begin_round(*args, capacity=8)
    bound(ad, inp, TORCH)  # the steps below: the torch references, on both rounds
    rows = vocab if released else 1 + depth * k  # RoPE: the vocabulary's rows, shared by the batch (stride 0)
    assert table.cand_x.shape == (2, rows, 16) and table.cand_qkv.shape == (2, rows, 48)
    assert (table.cand_rope is not None) == released == (table.cand_x.stride(0) == 0)
    assert plain.cand_x is None
    # step 1: the roots; step 2: children picked from pools 0 and 1 by their candidate rows
    lp, tok, cand = ad.step_top(table, torch.tensor([[0], [0]]), inp["root"][:, None], torch.tensor([[-1], [-1]]),
                                torch.zeros(2, 1, dtype=torch.long), 3, torch.zeros(2, 1, dtype=torch.long))
    lp_plain, tok_plain, cand_plain = ad.step_top(plain, torch.tensor([[0], [0]]), inp["root"][:, None],
                                                  torch.tensor([[-1], [-1]]), torch.zeros(2, 1, dtype=torch.long), 3)
    assert_close("root children", lp_plain, lp, 1e-6)
    assert torch.equal(tok, tok_plain) and torch.equal(cand, cand_plain)
    assert torch.equal(ids.flatten(1).gather(1, cand[:, 0] - 1), tok[:, 0])  # row 1 + j of pool 0 is ids[:, 0, j]
    slot, parent, dep = torch.tensor([[1, 2], [1, 2]]), torch.zeros(2, 2, dtype=torch.long), torch.ones(2, 2).long()
    got = ad.step(table, slot, tok[:, 0, :2], parent, dep, cand[:, 0, :2])
    want = ad.step(plain, slot, tok[:, 0, :2], parent, dep)
    assert_close("depth-1 nodes", want, got, 1e-6)
    assert_close("K/V", plain.k, table.k, 1e-6)
    assert torch.equal(plain.visible, table.visible)
    with pytest.raises(ValueError, match="cand must be"):
        ad.step(table, slot, tok[:, 0, :2], parent, dep, cand[:, 0])
    assert ad.begin_round(*args, capacity=8, root=inp["root"]).cand_x is None  # torch: no table
    bound(ad, inp, RuntimeOptions())  # auto: the kernels (and the table) on CUDA only
    assert ad.begin_round(*args, capacity=8, root=inp["root"]).cand_x is None
    monkeypatch.setattr(weaver_module, "CANDIDATE_TABLE_MAX_BYTES", 0)
    monkeypatch.setattr(weaver_module, "VOCAB_TABLE_MAX_BYTES", 0)
    bound(ad, inp, TRITON)
    assert ad.begin_round(*args, capacity=8, root=inp["root"]).cand_x is None


@pytest.mark.parametrize("released", [False, True], ids=["learned", "released"])
@torch.no_grad()
def test_vocab_tables_give_the_computed_candidate_table(monkeypatch, released: bool) -> None:
    """Where the table is built, bind fills every token's e_n (and, RoPE, the first block's q/k/v) once: a round
    gathers them (older variant), or (RoPE) reads them by token and rotates q / k at the node's position. Either
    way a candidate's rows equal the table computed per round (with VOCAB_TABLE_MAX_BYTES = 0), which
    `test_candidate_table_step_equals_computed_rows` ties to the steps; no vocabulary tables with the torch paths."""
    import weaver.speculative.weaver as weaver_module

    vocab, depth, k = 13, 3, 4
    inp = make_inputs(2, depth, vocab, seed=8)
    ad = bound(make_adapter(vocab, max_depth=depth, pool=k, layers=2, released=released), inp, TRITON)
    assert ad.vocab_x.shape == (vocab, 16) and (ad.vocab_qkv is not None) == released
    prior, ids = torch.topk(inp["marginals"], k, dim=-1)
    args = (inp["target_hidden"], inp["draft_hidden"], ids, prior)
    gathered = ad.begin_round(*args, capacity=8, root=inp["root"])
    monkeypatch.setattr(weaver_module, "VOCAB_TABLE_MAX_BYTES", 0)
    bound(ad, inp, TRITON)
    assert ad.vocab_x is None and ad.vocab_qkv is None
    computed = ad.begin_round(*args, capacity=8, root=inp["root"])
    if released:  # row r of the computed table: token t_r at depth d_r (row 0 the root, row 1 + t K + j pool t's)
        tokens = torch.cat([inp["root"][:, None], ids.flatten(1)], dim=1)  # [B, 1 + D K]
        depths = (torch.arange(1 + depth * k) - 1).div(k, rounding_mode="floor").add(1).clamp(min=0).expand_as(tokens)
        cos, sin = gathered.cand_rope
        positions = ad.node_positions(depths, depth)
        rows = torch.arange(2)[:, None]
        x = gathered.cand_x[rows, tokens]
        qkv = rotate_qk(gathered.cand_qkv[rows, tokens], ad.config.num_heads, cos[positions], sin[positions])
    else:
        x, qkv = gathered.cand_x, gathered.cand_qkv
    assert_close("cand_x", computed.cand_x, x, 1e-6)
    assert_close("cand_qkv", computed.cand_qkv, qkv, 1e-6)
    monkeypatch.undo()
    bound(ad, inp, TORCH)
    assert ad.vocab_x is None


def test_bind_keeps_the_options() -> None:
    """`bind(..., options=)` is how the adapter learns whether its kernels run (default: kernels="auto")."""
    inp = make_inputs(1, 2, 11)
    ad = make_adapter(11)
    assert ad.options == RuntimeOptions()
    ad.bind(inp["embed"], inp["lm_head"], options=TRITON)
    assert ad.options is TRITON
    ad.bind(inp["embed"], inp["lm_head"])
    assert ad.options == RuntimeOptions()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@torch.no_grad()
def test_table_rows_rotate_like_the_head_views(dtype: torch.dtype) -> None:
    """`qkv_rows` (the candidate table's q | k | v, rotated in the projection's row layout) equals `qkv`'s rotated
    [B, H, T, hd] views with the heads concatenated again, bit for bit; and compiled, the rotation after the
    projection is one kernel writing one buffer, the output (torch.cat's realised buffers were 4 kernels on CUDA)."""
    ad = make_adapter(13, max_depth=4, pool=4, layers=1, released=True).to(dtype)
    block = ad.blocks[0]
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(2, 9, ad.config.d_rank, generator=gen).to(dtype)
    positions = torch.randint(0, ad.config.max_depth + 1, (1, 9), generator=gen)
    rope = ad._rope(positions)
    want = torch.cat([part.transpose(1, 2).reshape(2, 9, -1) for part in block.qkv(x, rope)], dim=-1)
    got = block.qkv_rows(x, rope)
    assert got.dtype == want.dtype and torch.equal(got, want)
    from helpers.inductor import compiled_call

    compiled, call = compiled_call(torch.compile(block.qkv_rows, fullgraph=True), x, rope)
    assert_close("compiled", want.float(), compiled.float(), 1e-2 if dtype == torch.bfloat16 else 1e-6)  # bf16 rounds
    after_mm = call.split("extern_kernels.mm(", 1)[1]
    assert after_mm.count("empty_strided") == 1 and after_mm.count("cpp_fused") == 1, after_mm
