"""Depthwise causal short convolution (GDN's conv over [q|k|v]): sequence form, tree form, commit.

Per channel c, kernel width W (4 in Qwen), no bias, activations channels-last `[B, T, C]`::

    y_t[c] = act( sum_{j=0}^{W-1} weight[c, j] * x_{t-(W-1)+j}[c] )      weight[c, W-1] hits x_t

Positions before the first token come from the conv state: the last W-1 RAW (pre-conv, pre-activation)
inputs, `[B, C, W-1]`, oldest first (zeros when there is none). This is PyTorch's Conv1d
cross-correlation with W-1 left padding, i.e. HF `causal_conv1d_fn` / `causal_conv1d_update`.

On a tree (DESIGN §4.5, gdn.md §3.7) node i's window is itself plus its W-1 nearest ancestors; above
the root it continues into the state (the root's "parent" is state[..., -1], then state[..., -2], ...),
never into neighbours in the flattened node order. The math runs in float32 (float64 for float64 x).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["causal_conv1d", "check_conv_args", "conv_state_commit", "tree_conv1d"]


def check_conv_args(
    x: torch.Tensor, weight: torch.Tensor, state: torch.Tensor | None, activation: str | None
) -> int:
    """Validate shapes and activation of the conv ops (shared with the Triton versions); return W."""
    if x.dim() != 3:
        raise ValueError(f"x must be [B, T, C], got shape {tuple(x.shape)}")
    B, _, C = x.shape
    if weight.dim() != 2 or weight.shape[0] != C or weight.shape[1] < 1:
        raise ValueError(f"weight must be [C, W] with C = {C}, got shape {tuple(weight.shape)}")
    W = weight.shape[1]
    if state is not None and state.shape != (B, C, W - 1):
        raise ValueError(f"state must be [B, C, W-1] = {(B, C, W - 1)}, got shape {tuple(state.shape)}")
    if activation not in (None, "silu"):
        raise ValueError(f"activation must be None or 'silu', got {activation!r}")
    return W


def _acc(x: torch.Tensor) -> torch.dtype:
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def _finish(y: torch.Tensor, activation: str | None, dtype: torch.dtype) -> torch.Tensor:
    if activation == "silu":
        y = F.silu(y)
    return y.to(dtype)


def causal_conv1d(
    x: torch.Tensor,
    weight: torch.Tensor,
    state: torch.Tensor | None = None,
    activation: str | None = "silu",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Causal depthwise conv over a sequence, continuing from `state`.

    Args:
        x: [B, T, C]; weight: [C, W]; state: [B, C, W-1] raw inputs before x, oldest first (None = zeros).
        activation: None or "silu".
    Returns:
        y: [B, T, C] in x's dtype; new_state: [B, C, W-1] in x's dtype = last W-1 of concat(state, x).
    """
    W = check_conv_args(x, weight, state, activation)
    B, T, C = x.shape
    prev = x.new_zeros(B, W - 1, C) if state is None else state.transpose(1, 2).to(x.dtype)
    full = torch.cat([prev, x], dim=1)  # [B, W-1+T, C] raw inputs
    acc = _acc(x)
    if T == 0:  # nothing to convolve (unfold needs W columns); the state passes through
        y = full.new_zeros(B, 0, C, dtype=acc)
    elif T == 1:  # a decode step: W products per channel, which torch.compile fuses into one kernel (the einsum
        # below becomes a batched GEMV per channel there: 48 cuBLAS launches an AR step at the 27B shape)
        y = (full.to(acc) * weight.to(acc).t()[None]).sum(1, keepdim=True)
    else:
        windows = full.to(acc).unfold(1, W, 1)  # [B, T, C, W]; window t covers x_{t-(W-1)} .. x_t
        y = torch.einsum("btcw,cw->btc", windows, weight.to(acc))
    new_state = full[:, full.shape[1] - (W - 1) :].transpose(1, 2).contiguous()
    return _finish(y, activation, x.dtype), new_state


def tree_conv1d(
    x: torch.Tensor,
    weight: torch.Tensor,
    parents: torch.Tensor,
    state: torch.Tensor | None = None,
    activation: str | None = "silu",
) -> torch.Tensor:
    """Causal depthwise conv on a tree: each node's window is its own root path, then the state.

    Args:
        x: [B, N, C] raw inputs of the tree nodes; weight: [C, W].
        parents: LongTensor [B, N] (parents[:, 0] = -1, parents[b, i] < i; pad nodes have -1 and
            behave like roots).
        state: [B, C, W-1] committed raw inputs before the root, oldest first (None = zeros).
        activation: None or "silu".
    Returns:
        y: [B, N, C] in x's dtype.
    """
    W = check_conv_args(x, weight, state, activation)
    B, N, C = x.shape
    if parents.shape != (B, N):
        raise ValueError(f"parents must be [B, N] = {(B, N)}, got shape {tuple(parents.shape)}")
    acc = _acc(x)
    S = W - 1
    # Extended sequence: state columns 0..S-1, nodes at S..S+N-1, a zero sentinel at E = S+N.
    E = S + N
    prev = x.new_zeros(B, S, C) if state is None else state.transpose(1, 2)
    ext = torch.cat([prev.to(acc), x.to(acc), x.new_zeros(B, 1, C, dtype=acc)], dim=1)  # [B, E+1, C]
    par = parents.long()
    node_up = torch.where(par >= 0, par + S, torch.full_like(par, S - 1))  # root / pad -> last state col
    state_up = torch.arange(-1, S - 1, device=x.device).expand(B, S)  # state col s -> s-1
    up = torch.cat([state_up, node_up, torch.full((B, 1), E, device=x.device)], dim=1)
    up = torch.where(up < 0, torch.full_like(up, E), up)  # above the oldest state column: zeros
    ptr = torch.arange(S, E, device=x.device).expand(B, N)  # [B, N] each node's own slot
    y = x.to(acc) * weight[:, W - 1].to(acc)
    for j in range(1, W):
        ptr = up.gather(1, ptr)  # j-th ancestor (or state column, or sentinel)
        y = y + ext.gather(1, ptr[:, :, None].expand(B, N, C)) * weight[:, W - 1 - j].to(acc)
    return _finish(y, activation, x.dtype)


def conv_state_commit(x: torch.Tensor, path: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
    """Conv state after accepting `path`: the last W-1 raw inputs of concat(state, x[path]).

    Args:
        x: [B, N, C] raw inputs of the tree nodes; path: LongTensor [B, P] root..leaf node ids,
            right-padded with -1 (>= 1 valid entry per row); state: [B, C, W-1] before the root.
    Returns:
        new_state: [B, C, W-1] in x's dtype.
    """
    if x.dim() != 3 or state.dim() != 3 or state.shape[:2] != (x.shape[0], x.shape[2]):
        raise ValueError(
            f"need x [B, N, C] and state [B, C, W-1] with matching B, C; got {tuple(x.shape)}, "
            f"{tuple(state.shape)}"
        )
    B, N, C = x.shape
    S = state.shape[2]
    if path.dim() != 2 or path.shape[0] != B:
        raise ValueError(f"path must be [B, P] with B = {B}, got shape {tuple(path.shape)}")
    path = path.long()
    L = (path >= 0).sum(1, keepdim=True)  # [B, 1] valid path length
    # Column c of the result is entry L + c of concat(state, x[path]) (length S + L).
    idx = L + torch.arange(S, device=x.device)  # [B, S]
    from_state = idx < S
    node = path.gather(1, (idx - S).clamp(0, path.shape[1] - 1)).clamp_min(0)  # [B, S]
    from_x = x.gather(1, node[:, :, None].expand(B, S, C)).transpose(1, 2)  # [B, C, S]
    from_st = state.to(x.dtype).gather(2, idx.clamp(max=max(S - 1, 0))[:, None, :].expand(B, C, S))
    return torch.where(from_state[:, None, :], from_st, from_x)
