"""One fused Triton layer for the decode step, the tree verify and the DFlash draft.

A pre-norm attention + SwiGLU layer over M rows x [M, hidden] (the decode's B tokens, a verify's B T tree
nodes, a draft's B Bk block rows) is, in Triton launches,

    1. RMSNorm + q | k | v projection        one GEMM, the norm as its prologue
    2. qk-norm + RoPE + K/V write            inside 3 (the decode, small trees) or inside 1 (large trees)
    3. attention                             over the committed prefix and the rows this row sees
    4. o projection + residual               one GEMM, the residual as its epilogue
    5. RMSNorm + gate | up + SiLU(gate) * up one GEMM, both halves of the weight in one pass
    6. down projection + residual            one GEMM

then, after the last layer, the final norm + LM head in one more GEMM (which hands out the normed rows of a
tree pass). `FusedLayers.layer` is that sequence, written once; the three callers differ only in

- M: the decode's B rows take the per-row GEMV (each program reads its weight tile for one row), a tree's
  B T rows the row-tiled one (`row_tiles`: one weight read for a tile of rows);
- where a row sits (`Rows`): decode row b is the new token at position = slot = lengths[b]; tree row b T + j
  is node j at position lengths[b] + depth[b, j] and slot lengths[b] + j (scratch past the committed length);
- what a tree row sees besides the prefix (`Rows.visible`, per layer): its ancestors-or-self (the verify),
  the whole block (a bidirectional drafter layer) or the block rows up to itself (a causal one);
- where step 2 runs. The decode's one new token per row: inside `decode_attention`. A tree of at most
  ROPE_ATTENTION_MAX_NODES nodes: inside `tree_attention_rope`, whose programs rope every node's K themselves
  (from one `rope_table` a pass), since no earlier launch has written it. A larger tree: inside the qkv GEMM
  (`qkv_rope_kv`: a program's column tile is one head, roped before it is stored), then `tree_attention`.
  Where that GEMM cannot tile it (a head dim that is not a power of two >= 16, or q and k | v from two
  weights, as in the drafter): a launch of its own, `tree_rope_kv_write`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property, partial
from typing import NamedTuple

import torch

# The fused path is for launch-bound models (few kernels a layer, each a few us). Where one layer's weights
# pass this many bytes the step is bandwidth-bound and cuBLAS's GEMVs win: at the Qwen3.6-27B shapes (640 MB a
# layer) the fused Triton GEMVs reach 2.2-3.1 TB/s at their best tilings against cuBLAS's 3.4-4.3 (38.0 ms
# against 13.2 ms for a whole forward's GEMVs with the packaged tilings; benchmarks/results/scale/h200_gemv/),
# a loss of well over the ~25 us a layer that fusing saves; at SmolLM2's 7 MB a layer the fused path wins.
FUSED_MAX_LAYER_BYTES = 256 << 20


def too_large_for_fused(layer: torch.nn.Module) -> str | None:
    """Why a layer of this size should run its torch path (cuBLAS GEMVs) instead of the fused one, or None."""
    size = sum(p.numel() * p.element_size() for p in layer.parameters())
    if size > FUSED_MAX_LAYER_BYTES:
        return f"layers of {size / 2**20:.0f} MiB (bandwidth-bound: cuBLAS's GEMVs are faster there)"
    return None


# Inside the tree attention every program ropes the K of all T nodes, so that work grows as T^2 / BLOCK_R
# while the launch it saves is fixed: up to 32 nodes (a chain's verify, a draft block) it is the cheaper side.
ROPE_ATTENTION_MAX_NODES = 32

Gemm = Callable[..., torch.Tensor]  # fused_gemv, bound to the per-row or the row-tiled launch


class LayerWeights(NamedTuple):
    """One attention + SwiGLU layer's weights as the fused kernels read them (views, no copies)."""

    input_norm: torch.Tensor  # [hidden]
    qkv: tuple[torch.Tensor, ...]  # the fused q | k | v weight [(H + 2 Hkv) D, hidden], or (q, k | v) weights
    q_norm: torch.Tensor | None  # [D] per-head RMSNorm weights (qwen3), or None (llama)
    k_norm: torch.Tensor | None
    o: torch.Tensor  # [hidden, H D]
    post_norm: torch.Tensor  # [hidden]
    gate_up: torch.Tensor  # [2 I, hidden]: gate rows, then up rows
    down: torch.Tensor  # [hidden, I]


@dataclass(frozen=True)
class Rows:
    """Where the M rows of a pass sit in the caches and what each of them sees."""

    lengths: torch.Tensor  # [B] long: committed tokens of each batch row
    inv_freq: torch.Tensor  # [rot/2] fp32 RoPE frequencies
    depth: torch.Tensor | None = None  # [B, T] long: tree node depths; None: the decode (one token a row)
    visible: Sequence[torch.Tensor] = ()  # per layer [B, T, T] bool: row i sees tree row j (tree passes)
    rope: tuple[torch.Tensor, torch.Tensor] | None = None  # the nodes' rope_table: step 2 inside the attention

    @property
    def is_tree(self) -> bool:
        return self.depth is not None


class FusedLayers:
    """The fused layer sequence and what it needs besides the weights: the kernels, norm eps and head counts.

    The base of FastDecoder, FastVerifier and FastDrafter, which build the `Rows` of their pass and the
    `LayerWeights` of their layers, then call `run_layers` and `head`."""

    def __init__(self, eps: float, num_heads: int, num_kv_heads: int, head_dim: int) -> None:
        from weaver.kernels import triton as kernels  # imported here: the models layer must load without triton

        self.kernels = kernels
        self.eps = eps
        self.num_heads, self.num_kv_heads, self.head_dim = num_heads, num_kv_heads, head_dim

    @cached_property
    def qkv_rope(self) -> bool:
        """Whether the qkv GEMM's programs can tile q | k | v by heads (and so rope and write K/V: large trees)."""
        from weaver.kernels.triton.qkv_rope import head_dim_fits  # a triton module, as the kernels above

        return head_dim_fits(self.head_dim)

    def tree_rows(
        self, lengths: torch.Tensor, depth: torch.Tensor, inv_freq: torch.Tensor,
        visible: Sequence[torch.Tensor], dtype: torch.dtype,
    ) -> Rows:  # fmt: skip
        """The Rows of a tree pass; for a tree of at most ROPE_ATTENTION_MAX_NODES nodes, with its rope_table
        (one launch a pass, shared by every layer's attention)."""
        rope = None
        if depth.shape[1] <= ROPE_ATTENTION_MAX_NODES:
            rope = self.kernels.rope_table(lengths, depth, inv_freq, dtype)
        return Rows(lengths, inv_freq, depth, visible, rope)

    def gemm(self, rows: Rows) -> Gemm:
        """The projection launch: the per-row GEMV for the decode, the row-tiled GEMV for a tree's rows."""
        if rows.is_tree:
            return partial(self.kernels.fused_gemv, eps=self.eps, row_tiles=True)
        return self.kernels.fused_gemv

    def layer(
        self, x: torch.Tensor, w: LayerWeights, cache_k: torch.Tensor, cache_v: torch.Tensor, rows: Rows,
        visible: torch.Tensor | None = None, qkv_out: torch.Tensor | None = None,
    ) -> torch.Tensor:  # fmt: skip
        """One layer over the rows x [M, hidden] (module docstring), their K/V written to cache_k / cache_v
        [B, Hkv, S, D]; visible: this layer's [B, T, T] mask (tree passes); qkv_out: [M, (H + 2 Hkv) D] for
        q | k | v from several weights. Returns the layer's output rows [M, hidden]."""
        k, eps, h, hkv = self.kernels, self.eps, self.num_heads, self.num_kv_heads
        gemm = self.gemm(rows)
        # 1) norm + qkv, 2) qk-norm + RoPE + K/V write, 3) attention
        if not rows.is_tree:  # one token a row: 2) and 3) in one launch
            qkv = self.project_qkv(x, w, gemm, qkv_out)
            o = k.decode_attention(qkv, cache_k, cache_v, rows.lengths, rows.inv_freq, h, hkv, w.q_norm, w.k_norm,
                                   eps=eps)  # fmt: skip
        elif rows.rope is not None:  # a small tree: 2) inside the attention
            qkv = self.project_qkv(x, w, gemm, qkv_out)
            o = k.tree_attention_rope(qkv, cache_k, cache_v, rows.lengths, visible, *rows.rope, h, hkv, w.q_norm,
                                      w.k_norm, eps=eps)  # fmt: skip
        else:  # a large tree: 2) inside the qkv GEMM where it tiles, else a launch of its own
            if self.qkv_rope and len(w.qkv) == 1:
                q = k.qkv_rope_kv(x, w.qkv[0], w.input_norm, eps, cache_k, cache_v, rows.lengths, rows.depth,
                                  rows.inv_freq, h, hkv, w.q_norm, w.k_norm)[1]  # fmt: skip
            else:
                q = k.tree_rope_kv_write(self.project_qkv(x, w, gemm, qkv_out), cache_k, cache_v, rows.lengths,
                                         rows.depth, rows.inv_freq, h, hkv, w.q_norm, w.k_norm, eps=eps)  # fmt: skip
            o = k.tree_attention(q, cache_k, cache_v, rows.lengths, visible, h, hkv)
        # 4) o + residual, 5) norm + gate | up + SiLU(gate) * up, 6) down + residual
        x = gemm(o, w.o, residual=x)
        act = gemm(x, w.gate_up, norm_weight=w.post_norm, eps=eps, swiglu=True)
        return gemm(act, w.down, residual=x)

    def project_qkv(
        self, x: torch.Tensor, w: LayerWeights, gemm: Gemm, out: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Step 1: RMSNorm(x) @ [q | k | v]^T [M, (H + 2 Hkv) D], one launch per weight of w.qkv (into
        column slices of `out` when there are several)."""
        if len(w.qkv) == 1:
            return gemm(x, w.qkv[0], norm_weight=w.input_norm, eps=self.eps)
        start = 0
        for weight in w.qkv:
            gemm(x, weight, norm_weight=w.input_norm, eps=self.eps, out=out[:, start : start + weight.shape[0]])
            start += weight.shape[0]
        return out

    def run_layers(
        self, x: torch.Tensor, weights: Sequence[LayerWeights],
        caches: Sequence[tuple[torch.Tensor, torch.Tensor]], rows: Rows, capture_layers: tuple[int, ...] = (),
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:  # fmt: skip
        """Every layer over the rows x [M, hidden]: the last output and those of `capture_layers` ([M, hidden])."""
        qkv_out = None
        if weights and len(weights[0].qkv) > 1:  # one q | k | v buffer for every layer
            width = (self.num_heads + 2 * self.num_kv_heads) * self.head_dim
            qkv_out = torch.empty(x.shape[0], width, device=x.device, dtype=x.dtype)
        captured = []
        for i, (w, (cache_k, cache_v)) in enumerate(zip(weights, caches, strict=True)):
            visible = rows.visible[i] if rows.is_tree else None
            x = self.layer(x, w, cache_k, cache_v, rows, visible, qkv_out)
            if i in capture_layers:
                captured.append(x)
        return x, captured

    def head(
        self, x: torch.Tensor, norm_weight: torch.Tensor, weight: torch.Tensor, rows: Rows
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Final RMSNorm + LM head of the rows x [M, hidden]: logits [M, V] fp32 and, for a tree pass, the
        normed rows [M, hidden] (written by the same launch: its RMSNorm prologue is the final norm)."""
        gemm = self.gemm(rows)
        if not rows.is_tree:
            return gemm(x, weight, norm_weight=norm_weight, eps=self.eps, out_dtype=torch.float32), None
        hidden = torch.empty_like(x)
        logits = gemm(x, weight, norm_weight=norm_weight, eps=self.eps, out_dtype=torch.float32, norm_out=hidden)
        return logits, hidden
