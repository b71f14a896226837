import sys; sys.path.insert(0, "tests")
import torch
from helpers.attention import cache_inputs, rope_inv_freq
from weaver.kernels import triton as wt
from weaver.ops.tree import ancestor_mask, node_depth
for dtype in (torch.float32, torch.bfloat16):
  for qk_norm in (True, False):
    for rows, heads in (([[-1]], (9, 3)), ([[-1, 0, 1, 1, 0, 4, 2]], (8, 2))):
        gen = torch.Generator().manual_seed(0)
        parents = torch.tensor(rows); b, t = parents.shape; h, hkv = heads; d = 64
        lengths, ck, cv = cache_inputs(gen, parents, heads, d, 100, dtype)
        gen = torch.Generator().manual_seed(1)
        qkv = torch.randn(b * t, (h + 2 * hkv) * d, generator=gen).to(dtype).cuda()
        qn = (1 + 0.2 * torch.randn(d, generator=gen)).to(dtype).cuda() if qk_norm else None
        kn = (1 + 0.2 * torch.randn(d, generator=gen)).to(dtype).cuda() if qk_norm else None
        depth, anc = node_depth(parents).cuda(), ancestor_mask(parents).cuda()
        lengths, inv_freq = lengths.cuda(), rope_inv_freq(d, 1.0).cuda()
        two = [ck.cuda(), cv.cuda()]; one = [c.clone() for c in two]
        q = wt.tree_rope_kv_write(qkv, *two, lengths, depth, inv_freq, h, hkv, qn, kn, eps=1e-6)
        cos, sin = wt.rope_table(lengths, depth, inv_freq, dtype)
        wt.tree_attention_rope(qkv, *one, lengths, anc, cos, sin, h, hkv, qn, kn, eps=1e-6)
        for name, a, c in (("k", two[0], one[0]), ("v", two[1], one[1])):
            diff = (a.float() - c.float()).abs()
            print(dtype, "qk_norm", qk_norm, rows, name, "max abs diff", diff.max().item(), "n diff", int((diff > 0).sum()), "rel", (diff.max() / a.float().abs().max()).item())
