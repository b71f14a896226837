r"""Gated DeltaNet (GDN) in plain PyTorch: the recurrent spec, the chunk form, the tree form and the commit.

Symbols (DESIGN §4.3; one value head, state H in R^{K x V}, fla layout `[B, HV, K, V]`):

Recurrence (DESIGN §4.2, the truth everything else is tested against), per token t::

    H <- exp(g_t) H
    delta_t = beta_t (v_t - H^T k_t)
    H <- H + k_t delta_t^T
    o_t = H^T (scale q_t)                      # read AFTER the write

Chunk and tree form: with G the prefix sum of g along the sequence (chunk, restarting at every chunk)
or along each node's root path (tree), and H0 the state entering the chunk / the committed state::

    A[i, j]   = beta_i exp(G_i - G_j) k_i . k_j          j a strict ancestor of i (chain: j < i)
    (I + A) Delta = beta * (V - exp(G) * (K H0))          unit lower triangular solve
    O = scale * [exp(G) * (Q H0) + (M * exp(G_i - G_j) * Q K^T) Delta]    M = ancestor-or-self
    H(l) = exp(G_l) H0 + sum_{j on path(l)} exp(G_l - G_j) k_j Delta_j^T     (state after node l)

With topological node order A is strictly lower triangular, and (I + A)^-1 is zero outside
ancestor-or-self pairs, so every node gets exactly the recurrence along its own root path; siblings
never interact and H0 is only read. Off-mask G differences can be positive (a deep branch beside a
shallow one), so the exponent is set to -inf off the mask *before* exp.

Conventions (fla): q, k `[B, T, H, K]`; v `[B, T, HV, V]`; g (log decay <= 0) and beta `[B, T, HV]`;
value head hv uses key head hv // (HV // H). Internally heads are split as HV = H * R so a key head's
Gram matrices are computed once and broadcast over its R value heads. All gate, state and solve math
runs in float32 (float64 when any input is float64, for tests); o comes back in v's dtype.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from weaver.ops.tree import ancestor_mask, path_prefix_sum

__all__ = ["GDNTreeAux", "gdn_chunk", "gdn_gates", "gdn_recurrent", "gdn_tree", "gdn_tree_commit", "l2norm"]


class GDNTreeAux(NamedTuple):
    """Per-node factors kept from the tree pass so the commit needs no re-solve (DESIGN §4.4)."""

    k: torch.Tensor  # [B, T, H, K] float32, after l2norm when enabled, unscaled
    delta: torch.Tensor  # [B, T, HV, V] float32
    G: torch.Tensor  # [B, T, HV] float32, root-path prefix sum of g


def gdn_gates(
    a_raw: torch.Tensor, b_raw: torch.Tensor, A_log: torch.Tensor, dt_bias: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(g, beta) [B, T, HV] float32 from the in-projection's a and b (HF Qwen3.5: beta = sigmoid(b) in the
    activation dtype; g = -exp(A_log) softplus(a + dt_bias) in float32)."""
    beta = torch.sigmoid(b_raw).float()
    g = -A_log.float().exp() * torch.nn.functional.softplus(a_raw.float() + dt_bias.float())
    return g, beta


def l2norm(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """x / sqrt(sum(x^2) + eps) over the last dim (fla/HF convention: eps inside the sqrt)."""
    return x / torch.sqrt((x * x).sum(dim=-1, keepdim=True) + eps)


class _Prepared(NamedTuple):
    q: torch.Tensor  # [B, T, H, K] acc, normalised if asked, times scale
    k: torch.Tensor  # [B, T, H, K] acc, normalised if asked
    v: torch.Tensor  # [B, T, H, R, V] acc
    g: torch.Tensor  # [B, T, H, R] acc
    beta: torch.Tensor  # [B, T, H, R] acc
    h0: torch.Tensor | None  # [B, H, R, K, V] acc (a view/copy; never written)


def _acc_dtype(*xs: torch.Tensor) -> torch.dtype:
    """float32 for bf16/fp16/fp32 inputs; float64 if any input is float64 (for exactness tests)."""
    return torch.float64 if any(x.dtype == torch.float64 for x in xs) else torch.float32


def check_gdn_shapes(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    initial_state: torch.Tensor | None,
) -> tuple[int, int, int, int, int, int]:
    """(B, T, H, K, HV, V) of fla-layout GDN inputs; ValueError naming the numbers when they disagree."""
    if q.dim() != 4 or k.shape != q.shape:
        raise ValueError(f"q and k must both be [B, T, H, K], got {tuple(q.shape)} and {tuple(k.shape)}")
    B, T, H, K = q.shape
    if v.dim() != 4 or v.shape[:2] != (B, T):
        raise ValueError(f"v must be [B, T, HV, V] with B, T = {B}, {T}, got {tuple(v.shape)}")
    HV, V = v.shape[2], v.shape[3]
    if HV % H != 0:
        raise ValueError(f"num value heads HV={HV} must be a multiple of num key heads H={H}")
    for name, t in (("g", g), ("beta", beta)):
        if t.shape != (B, T, HV):
            raise ValueError(f"{name} must be [B, T, HV] = {(B, T, HV)}, got {tuple(t.shape)}")
    if initial_state is not None and initial_state.shape != (B, HV, K, V):
        raise ValueError(
            f"initial_state must be [B, HV, K, V] = {(B, HV, K, V)}, got {tuple(initial_state.shape)}"
        )
    return B, T, H, K, HV, V


def _prepare(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    scale: float | None,
    initial_state: torch.Tensor | None,
    use_qk_l2norm: bool,
) -> _Prepared:
    """Validate shapes, upcast, l2-normalise and scale q, split value heads into (H, R)."""
    B, T, H, K, HV, V = check_gdn_shapes(q, k, v, g, beta, initial_state)
    R = HV // H
    acc = _acc_dtype(q, k, v, g, beta)
    q, k = q.to(acc), k.to(acc)
    if use_qk_l2norm:
        q, k = l2norm(q), l2norm(k)
    q = q * (K**-0.5 if scale is None else scale)
    h0 = None if initial_state is None else initial_state.to(acc).reshape(B, H, R, K, V)
    return _Prepared(
        q=q,
        k=k,
        v=v.to(acc).reshape(B, T, H, R, V),
        g=g.to(acc).reshape(B, T, H, R),
        beta=beta.to(acc).reshape(B, T, H, R),
        h0=h0,
    )


def gdn_recurrent(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    scale: float | None = None,
    initial_state: torch.Tensor | None = None,
    output_final_state: bool = True,
    use_qk_l2norm: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The GDN recurrence, one token at a time (DESIGN §4.2 line by line): the spec.

    Args:
        q, k: [B, T, H, K]; v: [B, T, HV, V]; g (log decay, <= 0), beta: [B, T, HV].
        scale: multiplies q; None means K ** -0.5.
        initial_state: [B, HV, K, V] (read only); None means zeros.
        output_final_state: return the state after the last token.
        use_qk_l2norm: l2-normalise q and k over K first.
    Returns:
        o: [B, T, HV, V] in v's dtype; h: [B, HV, K, V] float32 (or None).
    """
    p = _prepare(q, k, v, g, beta, scale, initial_state, use_qk_l2norm)
    B, T, H, R, V = p.v.shape
    K = q.shape[-1]
    h = p.h0 if p.h0 is not None else p.v.new_zeros(B, H, R, K, V)
    alpha = p.g.exp()  # [B, T, H, R]
    o = p.v.new_empty(B, T, H, R, V)
    for t in range(T):
        h = h * alpha[:, t, :, :, None, None]  # decay first
        pred = torch.einsum("bhk,bhrkv->bhrv", p.k[:, t], h)  # H^T k with the decayed state
        delta = p.beta[:, t, :, :, None] * (p.v[:, t] - pred)
        h = h + torch.einsum("bhk,bhrv->bhrkv", p.k[:, t], delta)  # rank-1 write
        o[:, t] = torch.einsum("bhk,bhrkv->bhrv", p.q[:, t], h)  # read after the write
    if h is p.h0:  # T == 0: never hand back a view of the caller's initial_state
        h = h.clone()
    o = o.reshape(B, T, H * R, V).to(v.dtype)
    return o, (h.reshape(B, H * R, K, V) if output_final_state else None)


def _masked_exp(diff: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """exp(diff) where mask else 0, with -inf put in BEFORE exp so off-mask overflow cannot make NaN."""
    return torch.where(mask, diff, torch.full_like(diff, float("-inf"))).exp()


def gdn_chunk(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    scale: float | None = None,
    initial_state: torch.Tensor | None = None,
    output_final_state: bool = True,
    use_qk_l2norm: bool = False,
    chunk_size: int = 64,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Chunkwise UT/WY form (gdn.md §2): everything inside a chunk is matmuls, state passes between chunks.

    Same arguments and returns as `gdn_recurrent`, plus chunk_size (C >= 1; T need not be a multiple).
    Per chunk with local cumsum G: T = (I + A)^-1, U = T (beta V), W = T (beta e^G K), Delta = U - W H0,
    O = e^G (Q H0) + (M_incl e^{G_i - G_j} Q K^T) Delta, H_out = e^{G_C} H0 + (e^{G_C - G} K)^T Delta.
    """
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    p = _prepare(q, k, v, g, beta, scale, initial_state, use_qk_l2norm)
    B, T, H, R, V = p.v.shape
    K = q.shape[-1]
    C = chunk_size
    NC = -(-T // C)
    pad = NC * C - T

    def chunks(x: torch.Tensor) -> torch.Tensor:
        # [B, T, ...] -> [B, NC, C, ...]; pad tokens have g = beta = k = v = q = 0: an identity step.
        x = torch.nn.functional.pad(x, (0, 0) * (x.dim() - 2) + (0, pad))
        return x.reshape(B, NC, C, *x.shape[2:])

    qc = chunks(p.q).permute(0, 3, 1, 2, 4)  # [B, H, NC, C, K]
    kc = chunks(p.k).permute(0, 3, 1, 2, 4)  # [B, H, NC, C, K]
    vc = chunks(p.v).permute(0, 3, 4, 1, 2, 5)  # [B, H, R, NC, C, V]
    gc = chunks(p.g).permute(0, 3, 4, 1, 2)  # [B, H, R, NC, C]
    bc = chunks(p.beta).permute(0, 3, 4, 1, 2)  # [B, H, R, NC, C]

    G = gc.cumsum(-1)  # chunk-local prefix sums
    diff = G[..., :, None] - G[..., None, :]  # [B, H, R, NC, C, C]  G_i - G_j
    incl = torch.ones(C, C, dtype=torch.bool, device=q.device).tril()
    strict = incl.tril(-1)
    kk = (kc @ kc.transpose(-1, -2))[:, :, None]  # [B, H, 1, NC, C, C] per key head
    qk = (qc @ kc.transpose(-1, -2))[:, :, None]
    A = bc[..., None] * _masked_exp(diff, strict) * kk  # strictly lower
    P = _masked_exp(diff, incl) * qk  # output mixing matrix, lower incl. diagonal
    eG = G.exp()[..., None]  # [B, H, R, NC, C, 1]
    rhs = torch.cat([bc[..., None] * vc, bc[..., None] * eG * kc[:, :, None]], dim=-1)
    UW = torch.linalg.solve_triangular(A, rhs, upper=False, unitriangular=True)
    U, W = UW[..., :V], UW[..., V:]  # [B, H, R, NC, C, V], [B, H, R, NC, C, K]
    G_last = G[..., -1]  # [B, H, R, NC]
    k_dec = (G_last[..., None] - G).exp()[..., None] * kc[:, :, None]  # e^{G_C - G} K, exponent <= 0

    h = p.h0 if p.h0 is not None else p.v.new_zeros(B, H, R, K, V)
    o = p.v.new_empty(B, H, R, NC, C, V)
    for n in range(NC):
        delta = U[:, :, :, n] - W[:, :, :, n] @ h  # [B, H, R, C, V]
        o[:, :, :, n] = eG[:, :, :, n] * (qc[:, :, None, n] @ h) + P[:, :, :, n] @ delta
        h = G_last[:, :, :, n, None, None].exp() * h + k_dec[:, :, :, n].transpose(-1, -2) @ delta
    if h is p.h0:  # T == 0: never hand back a view of the caller's initial_state
        h = h.clone()
    o = o.reshape(B, H, R, NC * C, V)[:, :, :, :T].permute(0, 3, 1, 2, 4).reshape(B, T, H * R, V)
    return o.to(v.dtype), (h.reshape(B, H * R, K, V) if output_final_state else None)


def gdn_tree(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    parents: torch.Tensor,
    scale: float | None = None,
    initial_state: torch.Tensor | None = None,
    use_qk_l2norm: bool = False,
) -> tuple[torch.Tensor, GDNTreeAux]:
    """Tree verification: every node's output as if the recurrence ran along its root path (gdn.md §3).

    Args:
        q, k: [B, T, H, K]; v: [B, T, HV, V]; g, beta: [B, T, HV] (T = number of tree nodes).
        parents: LongTensor [B, T]; parents[:, 0] = -1, parents[b, i] < i; a node i > 0 with parent
            -1 is an isolated pad node (its own root from initial_state, affects nobody).
        scale: None means K ** -0.5.
        initial_state: [B, HV, K, V], the committed state before the root; read only. None = zeros.
    Returns:
        o: [B, T, HV, V] in v's dtype.
        aux: GDNTreeAux(k [B, T, H, K], delta [B, T, HV, V], G [B, T, HV]), float32, for the commit.
    """
    if parents.shape != q.shape[:2]:
        raise ValueError(f"parents must be [B, T] = {tuple(q.shape[:2])}, got {tuple(parents.shape)}")
    p = _prepare(q, k, v, g, beta, scale, initial_state, use_qk_l2norm)
    B, T, H, R, V = p.v.shape
    incl = ancestor_mask(parents)[:, None, None]  # [B, 1, 1, T, T] ancestor-or-self
    strict = incl & ~torch.eye(T, dtype=torch.bool, device=q.device)
    G = path_prefix_sum(p.g, parents)  # [B, T, H, R]

    kt = p.k.transpose(1, 2)  # [B, H, T, K]
    qt = p.q.transpose(1, 2)
    vt = p.v.permute(0, 2, 3, 1, 4)  # [B, H, R, T, V]
    Gt = G.permute(0, 2, 3, 1)  # [B, H, R, T]
    bt = p.beta.permute(0, 2, 3, 1)
    diff = Gt[..., :, None] - Gt[..., None, :]  # [B, H, R, T, T]
    kk = (kt @ kt.transpose(-1, -2))[:, :, None]  # Gram once per key head
    qk = (qt @ kt.transpose(-1, -2))[:, :, None]
    A = bt[..., None] * _masked_exp(diff, strict) * kk
    eG = Gt.exp()[..., None]  # [B, H, R, T, 1]
    rhs = vt
    if p.h0 is not None:
        rhs = rhs - eG * (kt[:, :, None] @ p.h0)
    rhs = bt[..., None] * rhs
    delta = torch.linalg.solve_triangular(A, rhs, upper=False, unitriangular=True)  # [B, H, R, T, V]
    o = (_masked_exp(diff, incl) * qk) @ delta
    if p.h0 is not None:
        o = o + eG * (qt[:, :, None] @ p.h0)
    o = o.permute(0, 3, 1, 2, 4).reshape(B, T, H * R, V)
    aux = GDNTreeAux(
        k=p.k,
        delta=delta.permute(0, 3, 1, 2, 4).reshape(B, T, H * R, V),
        G=G.reshape(B, T, H * R),
    )
    return o.to(v.dtype), aux


def gdn_tree_commit(aux: GDNTreeAux, path: torch.Tensor, initial_state: torch.Tensor | None) -> torch.Tensor:
    """State after the last node of `path`, folded from the tree pass's factors (DESIGN §4.4).

    H* = exp(G_l) H0 + sum_{j on path} exp(G_l - G_j) k_j delta_j^T, l = the path's last node.

    Args:
        aux: GDNTreeAux from `gdn_tree` (k [B, T, H, K], delta [B, T, HV, V], G [B, T, HV]).
        path: LongTensor [B, P], node ids root..leaf, right-padded with -1; >= 1 valid entry per row.
        initial_state: [B, HV, K, V], the same state passed to gdn_tree; None means zeros.
    Returns:
        h: [B, HV, K, V] float32 (float64 if aux is float64).
    """
    k, delta, G = aux
    B, T, H, K = k.shape
    HV, V = delta.shape[2], delta.shape[3]
    R = HV // H
    if path.dim() != 2 or path.shape[0] != B:
        raise ValueError(f"path must be [B, P] with B = {B}, got {tuple(path.shape)}")
    if initial_state is not None and initial_state.shape != (B, HV, K, V):
        raise ValueError(
            f"initial_state must be [B, HV, K, V] = {(B, HV, K, V)}, got {tuple(initial_state.shape)}"
        )
    path = path.long()
    valid = path >= 0  # [B, P]
    node = path.clamp_min(0)
    leaf = node.gather(1, (valid.sum(1, keepdim=True) - 1).clamp_min(0))  # [B, 1]
    G_l = G.gather(1, leaf[:, :, None].expand(B, 1, HV))  # [B, 1, HV]
    G_j = G.gather(1, node[:, :, None].expand(-1, -1, HV))  # [B, P, HV]
    w = _masked_exp(G_l - G_j, valid[:, :, None])  # [B, P, HV]; 0 on padding
    k_j = k.gather(1, node[:, :, None, None].expand(-1, -1, H, K))  # [B, P, H, K]
    d_j = delta.gather(1, node[:, :, None, None].expand(-1, -1, HV, V))  # [B, P, HV, V]
    w = w.reshape(B, -1, H, R)
    d_j = d_j.reshape(B, -1, H, R, V)
    h = torch.einsum("bphr,bphk,bphrv->bhrkv", w, k_j, d_j)
    if initial_state is not None:
        h = h + G_l.reshape(B, H, R, 1, 1).exp() * initial_state.to(h.dtype).reshape(B, H, R, K, V)
    return h.reshape(B, HV, K, V)
