r"""One GDN decode step after the conv, one Triton launch per layer: gates, q/k l2norm, the delta-rule update of
the committed state (in place) and the gated RMSNorm of the output, ready for out_proj.

Replaces what `weaver.models.gdn.GatedDeltaNet` runs for a single token in torch (`weaver.ops.gdn.gdn_recurrent`
plus the gate and norm math): ~20 small kernels and three fp32 GEMVs a layer on the H200 (the 27B AR-step
profile, benchmarks/results/scale/h200_profile/). One program per (batch row, value head) holds that head's
[K, V] fp32 state in registers; rounding points follow the torch code (o is rounded to the activation dtype
before the norm, the norm's weight product is rounded, beta is rounded after the sigmoid)::

    beta = sigmoid(b);  g = -exp(A_log) softplus(a + dt_bias)
    q, k = l2norm(q) K^-1/2, l2norm(k);  H <- exp(g) H;  H <- H + k (beta (v - H^T k))^T;  o = H^T q
    out = w * rmsnorm(o) * silu(z)
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from weaver.kernels.triton._utils import check_device, next_pow2

__all__ = ["gdn_decode"]


@triton.jit
def gdn_decode_kernel(
    mixed,  # [B, C] post-conv q | k | v of the step (row stride S_MIX)
    b_raw,  # [B, HV] (row stride S_B)
    a_raw,  # [B, HV] (row stride S_A)
    z,  # [B, HV * V] output gate (row stride S_Z)
    A_log,  # [HV]
    dt_bias,  # [HV]
    norm_w,  # [V]
    state,  # [B, HV, K, V] fp32, updated in place
    out,  # [B, HV * V] in the activation dtype
    S_MIX,
    S_B,
    S_A,
    S_Z,
    scale,
    eps,
    H: tl.constexpr,
    HV: tl.constexpr,
    K: tl.constexpr,
    V: tl.constexpr,
    BK: tl.constexpr,
    BV: tl.constexpr,
):
    i_bh = tl.program_id(0)
    i_b, i_hv = (i_bh // HV).to(tl.int64), i_bh % HV
    i_h = i_hv // (HV // H)
    o_k = tl.arange(0, BK)
    o_v = tl.arange(0, BV)
    m_k = o_k < K
    m_v = o_v < V
    dtype = out.dtype.element_ty

    row = mixed + i_b * S_MIX
    b_q = tl.load(row + i_h * K + o_k, mask=m_k, other=0).to(tl.float32)
    b_k = tl.load(row + H * K + i_h * K + o_k, mask=m_k, other=0).to(tl.float32)
    b_v = tl.load(row + 2 * H * K + i_hv * V + o_v, mask=m_v, other=0).to(tl.float32)
    b_q = b_q / tl.sqrt(tl.sum(b_q * b_q, 0) + 1e-6) * scale
    b_k = b_k / tl.sqrt(tl.sum(b_k * b_k, 0) + 1e-6)

    b_b = tl.load(b_raw + i_b * S_B + i_hv).to(tl.float32)
    beta = tl.sigmoid(b_b).to(dtype).to(tl.float32)  # torch: sigmoid in the activation dtype, then .float()
    b_x = tl.load(a_raw + i_b * S_A + i_hv).to(tl.float32) + tl.load(dt_bias + i_hv).to(tl.float32)
    softplus = tl.where(b_x > 20.0, b_x, tl.log(1.0 + tl.exp(tl.minimum(b_x, 20.0))))
    b_g = -tl.exp(tl.load(A_log + i_hv).to(tl.float32)) * softplus

    p_h = state + ((i_b * HV + i_hv) * K + o_k[:, None]) * V + o_v[None, :]
    m_h = m_k[:, None] & m_v[None, :]
    b_h = tl.load(p_h, mask=m_h, other=0) * tl.exp(b_g)
    pred = tl.sum(b_k[:, None] * b_h, 0)
    delta = beta * (b_v - pred)
    b_h += b_k[:, None] * delta[None, :]
    tl.store(p_h, b_h, mask=m_h)
    b_o = tl.sum(b_q[:, None] * b_h, 0)

    b_o = b_o.to(dtype).to(tl.float32)  # torch hands o back in v's dtype
    b_o = tl.where(m_v, b_o, 0.0)
    b_n = b_o * (1.0 / tl.sqrt(tl.sum(b_o * b_o, 0) / V + eps))
    b_n = (tl.load(norm_w + o_v, mask=m_v, other=0).to(tl.float32) * b_n.to(dtype).to(tl.float32)).to(dtype)
    b_z = tl.load(z + i_b * S_Z + i_hv * V + o_v, mask=m_v, other=0).to(tl.float32)
    b_out = b_n.to(tl.float32) * (b_z * tl.sigmoid(b_z))
    tl.store(out + i_b * (HV * V) + i_hv * V + o_v, b_out.to(dtype), mask=m_v)


def _rows(x: torch.Tensor, width: int, name: str) -> torch.Tensor:
    """x [B, 1, width] or [B, width] as a [B, width] view with unit column stride (copied only if it has none)."""
    x = x.reshape(x.shape[0], -1) if x.dim() == 3 else x
    if x.dim() != 2 or x.shape[1] != width:
        raise ValueError(f"{name} must be [B, 1, {width}], got {tuple(x.shape)}")
    return x if x.stride(1) == 1 else x.contiguous()


def gdn_decode(
    mixed: torch.Tensor,
    b_raw: torch.Tensor,
    a_raw: torch.Tensor,
    z: torch.Tensor,
    A_log: torch.Tensor,
    dt_bias: torch.Tensor,
    norm_weight: torch.Tensor,
    eps: float,
    state: torch.Tensor,
    num_k_heads: int,
) -> torch.Tensor:
    """The gated, normed output [B, 1, HV * V] of one GDN decode step; `state` [B, HV, K, V] fp32 is advanced.

    mixed: [B, 1, 2 H K + HV V] after the conv (q | k | v); b_raw, a_raw: [B, 1, HV]; z: [B, 1, HV V];
    A_log, dt_bias: [HV]; norm_weight: [V]. Views with unit last stride are read in place.
    """
    B, HV, K, V = state.shape
    H = num_k_heads
    if state.dtype != torch.float32 or not state.is_contiguous():
        raise ValueError(f"state must be a contiguous float32 [B, HV, K, V], got {state.dtype} {tuple(state.shape)}")
    if HV % H or A_log.shape != (HV,) or dt_bias.shape != (HV,) or norm_weight.shape != (V,):
        raise ValueError(f"GDN decode shapes disagree: H={H}, state {tuple(state.shape)}, A_log "
                         f"{tuple(A_log.shape)}, dt_bias {tuple(dt_bias.shape)}, norm {tuple(norm_weight.shape)}")
    mixed2 = _rows(mixed, 2 * H * K + HV * V, "mixed")
    b2, a2, z2 = _rows(b_raw, HV, "b_raw"), _rows(a_raw, HV, "a_raw"), _rows(z, HV * V, "z")
    check_device(mixed2, b2, a2, z2, A_log, dt_bias, norm_weight, state)
    out = torch.empty(B, 1, HV * V, dtype=z.dtype, device=z.device)
    BK, BV = next_pow2(K), next_pow2(V)
    gdn_decode_kernel[(B * HV,)](
        mixed2, b2, a2, z2, A_log, dt_bias, norm_weight, state, out,
        mixed2.stride(0), b2.stride(0), a2.stride(0), z2.stride(0), K**-0.5, eps,
        H=H, HV=HV, K=K, V=V, BK=BK, BV=BV, num_warps=4,
    )  # fmt: skip  4 warps: 6.69 us a 27B layer against 7.69 with 8 (H100, scripts/gpu/gdn_decode_warps.py)
    return out
