"""Compile the GDN tree kernels for Hopper (sm_90a) on a machine without a GPU; print registers and spills.

    TRITON_INTERPRET=0 PYTHONPATH=src python scripts/triton_compile_check.py [--T 128 256] [--dtype bf16]
    TRITON_INTERPRET=0 PYTHONPATH=src python scripts/triton_compile_check.py --topk --T   # top-k kernel only
    TRITON_INTERPRET=0 PYTHONPATH=src python scripts/triton_compile_check.py --node-attention --T   # Weaver step
    ... --adapter-gemv --frontier --T   # Weaver step GEMVs, builder bookkeeping
    ... --vocab-top1 --T   # greedy argmax + max log-softmax over the vocabulary
    ... --verify --T       # the tree verify's RoPE table, RoPE + K/V write, attention with RoPE inside
    ... --gemm-rows --T    # the verify's 16-row GEMMs: registers, spills, static SASS instruction counts
    ... --T 65 --dtype bf16 --bench-call   # also the prep as `weaver bench kernels` launches it
    ... --commit --T       # the stacked GDN commit fold's state tiles (BK x BV, warps)
    ... --gemv-27b --T     # the 27B AR step's one-row GEMVs, with an RMSNorm prologue or not
    ... --gemv-tma --T     # the TMA GEMV at the 27B shapes: registers, shared memory, TMA copies a program

Needs triton with its bundled ptxas (no CUDA device). Catches compiler crashes and register spills at the
benchmark shape (H=16, HV=48, K=V=128) before spending GPU time.
"""

from __future__ import annotations

import argparse
import itertools
import os
import subprocess
import tempfile
from pathlib import Path

os.environ["TRITON_INTERPRET"] = "0"  # before triton / weaver.kernels.triton are imported

import importlib  # noqa: E402

import torch  # noqa: E402
import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from weaver.kernels.triton._utils import next_pow2, precision_code  # noqa: E402

gt = importlib.import_module("weaver.kernels.triton.gdn_tree")  # the module: the package exports a function so named
tk = importlib.import_module("weaver.kernels.triton.topk")
na = importlib.import_module("weaver.kernels.triton.node_attention")
dc = importlib.import_module("weaver.kernels.triton.decode")
wf = importlib.import_module("weaver.kernels.triton.weaver_frontier")
vt = importlib.import_module("weaver.kernels.triton.vocab_top1")
vf = importlib.import_module("weaver.kernels.triton.tree_attention")
pt = importlib.import_module("weaver.kernels.triton.pool_top")
qr = importlib.import_module("weaver.kernels.triton.qkv_rope")
gc = importlib.import_module("weaver.kernels.triton.gdn_commit")
sa = importlib.import_module("weaver.kernels.triton.split_attention")
tma = importlib.import_module("weaver.kernels.triton.gemv_tma")


def compile_kernel(fn, args: dict, constexprs: dict, num_warps: int, num_stages: int = 1, divisible=()):
    """args: name -> triton type string; constexprs: name -> value; divisible: integer args the launcher
    would see as multiples of 16 (it specialises on that). A kernel with a PDL constexpr compiles with it on,
    as it launches on Hopper, unless constexprs say otherwise. Returns the compiled kernel."""
    if "PDL" in fn.arg_names:
        constexprs = {"PDL": True, **constexprs}
    sig = {name: args.get(name, "constexpr") for name in fn.arg_names}
    # pointers 16-byte aligned, as the launcher specialises them for torch tensors
    attrs = {
        (i,): [["tt.divisibility", 16]] for i, n in enumerate(fn.arg_names) if sig[n].startswith("*") or n in divisible
    }
    src = ASTSource(fn=fn, signature=sig, constexprs=constexprs, attrs=attrs)
    target = GPUTarget("cuda", 90, 32)
    return triton.compile(src, target=target, options=dict(num_warps=num_warps, num_stages=num_stages))


def report(name: str, kern) -> str:
    """Registers, spill stores/loads and stack frame from cuobjdump's resource usage of the cubin."""
    tool = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(kern.asm["cubin"])
        f.flush()
        usage = subprocess.run([str(tool), "--dump-resource-usage", f.name], capture_output=True, text=True).stdout
    line = next((x.strip() for x in usage.splitlines() if "REG:" in x), usage.strip()[-200:])
    return f"{name}: {line} | shared={kern.metadata.shared}"


def check_gdn_tree(T: int, dtype: str, cfg: gt.GDNTreeConfig, model_call: bool = True) -> list[str]:
    """model_call: the prep as the model's verify launches it (raw gates, q/k l2-normalised inside); False: as
    `weaver bench kernels` does (gates and normalised q/k precomputed)."""
    H, HV, K, V = 16, 48, 128, 128
    el = "bf16" if dtype == "bf16" else "fp32"
    prec = precision_code(cfg.precision, torch.bfloat16 if dtype == "bf16" else torch.float32)
    lead = int(cfg.lead and T > 1)
    TP = gt.tile_rows(T - lead, cfg.BT)
    common = dict(H=H, HV=HV, K=K, V=V, BT=cfg.BT, USE_H0=True, PREC=prec, INTERPRET=False)
    prep_args = {n: "*fp32" for n in ("h0", "amat", "pmat", "lead", "rhs", "qh", "aux_k", "aux_G", "A_log", "dt_bias")}
    prep_args.update(q=f"*{el}", k=f"*{el}", v=f"*{el}", g=f"*{el}", beta=f"*{el}", anc="*i8", depth="*i32",
                     scale="fp32", T="i32", W0="i32",
                     **{n: "i32" for n in ("sqb", "sqt", "svb", "svt", "sgb", "sgt", "sbb", "sbt")})  # fmt: skip
    prep_const = dict(common, BK=next_pow2(K), BVP=cfg.BVP, TP=TP, TA=next_pow2(T), LOG2BT=cfg.BT.bit_length() - 1,
                      L2NORM=model_call, LOWP=dtype == "bf16", RAW=model_call, LEAD=lead)  # fmt: skip
    preps = []  # one kernel for every item kind, or (split_prep) one per kind
    kinds = ((1, "prep diagonal"), (2, "prep pair"), (3, "prep state")) if cfg.split_prep else ((0, "prep"),)
    for items, name in kinds:
        kern = compile_kernel(gt.gdn_tree_prep_kernel, prep_args, dict(prep_const, ITEMS=items), cfg.prep_warps,
                              cfg.prep_stages)
        preps.append(report(f"T={T} {dtype} {cfg} {name}{'' if model_call else ' (bench call)'}", kern))
    solve_args = {n: "*fp32" for n in ("amat", "pmat", "lead", "rhs", "qh", "aux_delta")}
    solve_args.update(o=f"*{el}", T="i32")
    solve_const = dict(HV=HV, V=V, BT=cfg.BT, BV=cfg.BV, TP=TP, USE_H0=True, PREC=prec, INTERPRET=False)
    if cfg.solve_order == "right":
        solve_const["LEAD"] = lead
    solve_fn = gt.gdn_tree_solve_kernel if cfg.solve_order == "right" else gt.gdn_tree_solve_left_kernel
    solve = compile_kernel(solve_fn, solve_args, solve_const, cfg.num_warps, cfg.num_stages)
    return [*preps, report(f"T={T} {dtype} {cfg} solve", solve)]


def check_small_topk() -> list[str]:
    """The tree builders' top-k kernel at their shapes (frontier pop N=520 k=4, children N=512 k=8) and the
    largest it takes (N=8192, k=64), with the launcher's block size and warps."""
    out = []
    for el in ("fp32", "fp64"):
        for N, k in ((520, 4), (512, 8), (8192, 64)):
            block_n, block_k, warps = tk.topk_config(N, k)
            args = dict(x=f"*{el}", values=f"*{el}", indices="*i64", N="i32", k="i32", stride_x="i32")
            const = dict(BLOCK_N=block_n, BLOCK_K=block_k, IS64=el == "fp64")
            kern = compile_kernel(tk.small_topk_kernel, args, const, num_warps=warps)
            out.append(report(f"small_topk {el} N={N} k={k}", kern))
    return out


def check_node_attention() -> list[str]:
    """The Weaver step's attention at its H200 shape (bf16, B=1, H=8, W=4 and 8 nodes, S=300, D=64), then the
    dispatcher's limits (W=64, D=256; bf16 and fp32), each with the launcher's default configuration;
    strides as in `WeaverAdapter.step` (q a permuted view of the qkv projection, k/v `buf[layer]` of
    [L, B, H, S, D] buffers: multiples of 16; mask [B, W, S] with unit stride along S). S and B are runtime
    arguments (the kernel is the same for every S); programs = B * H."""
    out = []
    H = 8
    dtypes = {"bf16": torch.bfloat16, "fp32": torch.float32}
    for el, W, D, group in (("bf16", 4, 64, 1), ("bf16", 8, 64, 1), ("bf16", 16, 64, 3), ("bf16", 64, 256, 1),
                            ("fp32", 8, 64, 1), ("fp32", 64, 256, 1)):  # fmt: skip
        block_w, block_d, block_s, warps, stages = na.node_attention_config(W, D, dtypes[el])
        ptrs = dict(q_ptr=f"*{el}", k_ptr=f"*{el}", v_ptr=f"*{el}", mask_ptr="*u8", out_ptr=f"*{el}")
        strides = [f"stride_{t}{d}" for t in "qkv" for d in ("b", "h", "w" if t == "q" else "s")]
        args = dict(ptrs, W="i32", S="i32", qk_scale="fp32", stride_mb="i32", stride_mw="i32")
        args.update({n: "i32" for n in strides})
        const = dict(stride_ms=1, H=H if group == 1 else 9, D=D, INTERPRET=False, BLOCK_W=block_w, BLOCK_D=block_d,
                     BLOCK_S=block_s, GROUP=group)  # fmt: skip
        kern = compile_kernel(na.node_attention_kernel, args, const, warps, stages, divisible=strides)
        name = f"node_attention {el} W={W} D={D} GROUP={group} BLOCK_W={block_w} BLOCK_S={block_s} warps={warps}"
        out.append(f"{report(name, kern)} | stages={stages}")
    return out


def compile_gemv(name: str, n: int, k: int, rows: int, flags: dict, warps: int | None = None) -> str:
    """One decode-GEMV launch (bf16) at gemv_config's block sizes for `rows` input rows (warps: instead of its)."""
    block_n, block_k, rule_warps = dc.gemv_config(n, k, rows, torch.device("cuda"), swiglu=flags.get("SWIGLU", False))
    warps = warps or rule_warps
    ptrs = ("x_ptr", "w_ptr", "norm_ptr", "res_ptr", "out_ptr", "bias_ptr", "norm_bias_ptr")
    args = {p: "*bf16" for p in ptrs}
    args.update(M="i32", K="i32", N_OUT="i32", HALF="i32", eps="fp32", stride_xm="i32", stride_wn="i32",
                stride_rm="i32", stride_om="i32")  # fmt: skip
    const = dict(NORM=False, SWIGLU=False, RESIDUAL=False, NORM_FP32=False, NORM_BIAS=False, BIAS=False,
                 GELU=False, BLOCK_N=block_n, BLOCK_K=block_k, K_LINES=triton.next_power_of_2(triton.cdiv(k, 64)),
                 BLOCK_M=1)
    const.update(flags)
    kern = compile_kernel(dc._gemv_kernel, args, const, warps, divisible=("stride_xm", "stride_wn", "stride_om"))
    return report(f"{name} N={n} K={k} BLOCK_N={block_n} BLOCK_K={block_k} warps={warps} SASS={sass_count(kern)} "
                  f"{loads_before_math(kern)}", kern)  # fmt: skip


def check_adapter_gemv() -> list[str]:
    """The decode GEMV with the Weaver adapter's options (the MLP's three launches at d_rank 512, MLP 1024),
    for 4 rows."""
    cases = (("o+res", 512, 512, dict(RESIDUAL=True)),
             ("norm+fc1+gelu", 1024, 512, dict(NORM=True, NORM_FP32=True, NORM_BIAS=True, BIAS=True, GELU=True)),
             ("fc2+bias+res", 512, 1024, dict(RESIDUAL=True, BIAS=True)))  # fmt: skip
    return [compile_gemv(f"adapter gemv {name}", n, k, 4, flags) for name, n, k, flags in cases]


def check_gemv_27b() -> list[str]:
    """The one-row GEMVs of the Qwen3.6-27B AR step (gemv_config's long tiles), and the same with an RMSNorm
    prologue (fp32, one rounding: Qwen3.5's) at the rule's warps and twice them: what the prologue costs in
    registers (session 46: the prologue made these GEMVs 71 -> 94 us a call on an H100)."""
    norm = dict(NORM=True, NORM_FP32=True)
    out = []
    for name, n, k, flags in (("gate_up+swiglu", 17408, 5120, dict(SWIGLU=True)), ("gdn.in_proj", 16480, 5120, {}),
                              ("o/out_proj+res", 5120, 6144, dict(RESIDUAL=True))):  # fmt: skip
        rule = dc.gemv_config(n, k, 1, torch.device("cuda"), swiglu=flags.get("SWIGLU", False))[2]
        out.append(compile_gemv(f"27b gemv {name}", n, k, 1, flags))
        if not flags.get("RESIDUAL"):
            out += [compile_gemv(f"27b gemv {name}+norm", n, k, 1, {**flags, **norm}, w) for w in (rule, 2 * rule)]
    return out


def check_gemv_tma() -> list[str]:
    """gemv_tma with PDL at the 27B one-row shapes over a few tilings, with the residual add where the model adds
    one (out_proj, down) and with its RMSNorm where a norm comes before the projection: registers, shared memory,
    the TMA copies (cp.async.bulk.tensor) and barriers in the PTX (whether the pipeliner put STAGES tiles in
    flight), and how far after the PDL wait the first copy issues (the norm must not hold the weight stream back)."""
    out = []
    for name, k, swiglu, norms in (("out_proj+res", 6144, False, (False,)), ("down+res", 17408, False, (False,)),
                                   ("in_proj", 5120, False, (False, True)),
                                   ("gate_up+swiglu", 5120, True, (False, True))):  # fmt: skip
        for (bn, bk, stages, warps), norm in itertools.product(
            (tma.TmaTiles(), tma.TmaTiles(16, 128, 8), tma.TmaTiles(32, 256, 4, 8)), norms
        ):
            args = {"w_desc": f"tensordesc<bf16[{bn}, {bk}]>", "w_ptr": "*bf16", "x_ptr": "*bf16", "norm_ptr": "*bf16",
                    "res_ptr": "*bf16", "out_ptr": "*bf16", "N_OUT": "i32", "K": "i32", "UP_ROW": "i32",
                    "eps": "fp32"}  # fmt: skip
            k_lines = triton.next_power_of_2(triton.cdiv(min(k, stages * bk), 64))
            const = dict(BLOCK_N=bn, BLOCK_K=bk, STAGES=stages, SWIGLU=swiglu, NORM=norm,
                         RESIDUAL=name.endswith("+res"), K_LINES=k_lines)  # fmt: skip
            kern = compile_kernel(tma._gemv_tma_kernel, args, const, warps, stages, divisible=("K",))
            ptx = kern.asm["ptx"]
            ptx_lines = ptx.splitlines()
            first = next(i for i, line in enumerate(ptx_lines) if "cp.async.bulk.tensor" in line)
            wait = next(i for i, line in enumerate(ptx_lines) if "griddepcontrol.wait" in line)
            copies = (f"TMA copies={ptx.count('cp.async.bulk.tensor')} mbarrier ops={ptx.count('mbarrier.')} "
                      f"first copy {first - wait} PTX lines after the PDL wait")  # fmt: skip
            out.append(report(f"27b gemv_tma {name}{'+norm' if norm else ''} {(bn, bk, stages, warps)} {copies}", kern))
    return out


def check_gdn_decode() -> list[str]:
    """The GDN decode step's kernel at the Qwen3.6-27B shape (H 16, HV 48, K = V = 128, 4 warps): registers,
    spills and its static SASS count."""
    gd = importlib.import_module("weaver.kernels.triton.gdn_decode")
    args = dict(mixed="*bf16", b_raw="*bf16", a_raw="*bf16", z="*bf16", A_log="*fp32", dt_bias="*bf16",
                norm_w="*bf16", state="*fp32", out="*bf16", S_MIX="i32", S_B="i32", S_A="i32", S_Z="i32",
                scale="fp32", eps="fp32")  # fmt: skip
    kern = compile_kernel(gd.gdn_decode_kernel, args, dict(H=16, HV=48, K=128, V=128, BK=128, BV=128), 4)
    return [report(f"gdn_decode 27B SASS={sass_count(kern)} {loads_before_math(kern)}", kern)]


def check_decode() -> list[str]:
    """The AR step's launches at SmolLM2's shapes (bf16, PDL on as launched on Hopper): its five GEMVs for one
    row, and qk-norm-free RoPE + K/V write + attention (9 / 3 heads of 64)."""
    cases = (("qkv+norm", 960, 576, dict(NORM=True)), ("o+res", 576, 576, dict(RESIDUAL=True)),
             ("gate_up+norm+swiglu", 1536, 576, dict(NORM=True, SWIGLU=True)),
             ("down+res", 576, 1536, dict(RESIDUAL=True)), ("lm_head+norm", 49152, 576, dict(NORM=True)))
    out = [compile_gemv(f"decode gemv {name}", n, k, 1, flags) for name, n, k, flags in cases]
    ptrs = {p: "*bf16" for p in ("qkv_ptr", "k_ptr", "v_ptr", "qn_ptr", "kn_ptr", "out_ptr")}
    strides = ("stride_qkv", "stride_cb", "stride_ch", "stride_cs", "stride_out")
    args = dict(ptrs, len_ptr="*i64", inv_freq_ptr="*fp32", S="i32", eps="fp32", scale="fp32",
                **dict.fromkeys(strides, "i32"))  # fmt: skip
    const = dict(H=9, HKV=3, D=64, ROT=64, QK_NORM=False, BLOCK_D=64, BLOCK_S=128, PDL=True)
    kern = compile_kernel(dc._decode_attention_kernel, args, const, 4, divisible=strides)
    out.append(report(f"decode attention PDL SASS={sass_count(kern)}", kern))
    return out


def check_weaver_frontier() -> list[str]:
    """The device weaver builder's pop with its nodes' inputs at the benchmark's round (frontier 512, w 4, c 8,
    d_rank 512, 8 heads, P + S = 16 + 69) and at the paper's 27B adapter, as the launcher configures it (the push
    runs in pool_top), for both sources of the nodes' rows."""
    i64 = "i32"
    pop_args = dict(f_score="*fp64", f_item="*i64", f_logp="*fp32", count="*i64", nodes="*i64", logps="*fp32",
                    valid="*u8", step="*i64", node_out="*i64", grow_out="*u8", score_out="*fp64")  # fmt: skip
    pop_args.update({n: i64 for n in ("F", "N", "DEPTH", "W", "B", "stride_fs", "stride_fi", "stride_fl",
                                      "stride_nb", "stride_lb", "stride_vb")})  # fmt: skip
    inp_ptrs = dict(visible="*u8", prefix="*u8", cand_x="*bf16", cand_qkv="*bf16", k_buf="*bf16", x_out="*bf16",
                    q_out="*bf16", mask_out="*u8", rope_cos="*bf16", rope_sin="*bf16")  # fmt: skip
    pop_inp = dict(pop_args, **inp_ptrs, v_buf="*bf16", P=i64, S_TOT=i64, D=i64, HD=i64,
                   stride_visb=i64, stride_viss=i64, **{n: i64 for n in ("stride_cxb", "stride_cxr", "stride_cqb",
                   "stride_cqr", "stride_kb", "stride_kh", "stride_ks", "stride_vvb", "stride_vvh", "stride_vvs")})
    out = []
    # the benchmark's round, and the paper's adapter at 27B (d_rank 2048 in passes of 512 columns, c 16: F 1,040)
    for name, block_f in (("F=512 w=4 d=512", 512), ("F=1040 w=4 d=2048", 2048)):
        for rope in (False, True):  # the round's table (older variant) / the vocabulary's rows, rotated (RoPE)
            const = dict(BLOCK_F=block_f, BLOCK_W=4, BLOCK_S=128, BLOCK_D=512, ROPE=rope)
            kern = compile_kernel(wf._pop_kernel, pop_inp, const, 4)
            out.append(report(f"frontier pop+inputs {name} rope={rope}", kern))
    return out


def check_pool_top() -> list[str]:
    """The Weaver step's scoring tail at the benchmark's adapter (d_rank 512, pool 512, c 8, bf16): the pool
    logits, and the log-softmax + top-c launch with and without the frontier push inside."""
    args = dict(y="*bf16", norm_w="*bf16", norm_b="*bf16", table="*bf16", ids="*i64", prior="*fp32", pool="*i64",
                logits="*fp32", W="i32", K="i32", D="i32", eps="fp32", stride_y="i32", stride_t="i32",
                stride_ib="i32", stride_id="i32", stride_pb="i32", stride_pd="i32")  # fmt: skip
    kern = compile_kernel(pt._pool_logits_kernel, args, dict(HAS_BIAS=True, BLOCK_K=16, BLOCK_D=512), 4)
    out = [report("pool_logits d=512 BLOCK_K=16", kern)]
    args = dict(logits="*fp32", ids="*i64", pool="*i64", out_lp="*fp32", out_tok="*i64", out_ix="*i64",
                f_score="*fp64", f_item="*i64", f_logp="*fp32", node="*i64", grow="*u8", score="*fp64",
                depth="*i64", W="i32", K="i32", c="i32", stride_ib="i32", stride_id="i32", stride_fs="i32",
                stride_fi="i32", stride_fl="i32")  # fmt: skip
    for push in (False, True):
        kern = compile_kernel(pt._pool_top_kernel, args, dict(BLOCK_K=512, BLOCK_C=8, PUSH=push), 4)
        out.append(report(f"pool_top K=512 c=8 push={push}", kern))
    return out


def check_vocab_top1() -> list[str]:
    """The greedy top-1's two launches (chunk partials, row combine) at the drafter's and the target's
    vocabularies (49152, 151936), fp32 and bf16 logits of contiguous rows, as the launcher configures them."""
    out = []
    for V in (49152, 151936):
        chunk, C, warps = vt.vocab_top1_config(V)
        for el in ("fp32", "bf16"):
            args = dict(x=f"*{el}", part_max="*fp32", part_idx="*i64", part_sum="*fp32", V="i32", C="i32",
                        stride_x="i32")  # fmt: skip
            kern = compile_kernel(vt._chunk_kernel, args, dict(CHUNK=chunk), warps, divisible=("V", "stride_x"))
            out.append(report(f"vocab_top1 chunks {el} V={V} CHUNK={chunk} C={C} warps={warps}", kern))
        args = dict(part_max="*fp32", part_idx="*i64", part_sum="*fp32", logp="*fp32", index="*i64", C="i32")
        kern = compile_kernel(vt._combine_kernel, args, dict(BLOCK_C=next_pow2(C, 2)), 1)
        out.append(report(f"vocab_top1 combine C={C} BLOCK_C={next_pow2(C, 2)}", kern))
    return out


def check_verify() -> list[str]:
    """The tree verify's attention launches at SmolLM2's attention (9 / 3 heads of 64, bf16): RoPE + K/V write
    alone, its table, and attention with RoPE inside at the tuned tiles, with and without qk-norm."""
    out = []
    strides = ("stride_qkv", "stride_cb", "stride_ch", "stride_cs", "stride_o", "stride_q")
    ints = dict.fromkeys(("T", "S", "stride_db", "stride_dj", "stride_ab", "stride_ai", "stride_aj", *strides), "i32")
    ptrs = {n: "*bf16" for n in ("qkv_ptr", "k_ptr", "v_ptr", "qn_ptr", "kn_ptr", "out_ptr", "q_out_ptr", "cos_ptr",
                                 "sin_ptr")}  # fmt: skip
    args = dict(ints, **ptrs, len_ptr="*i64", depth_ptr="*i64", anc_ptr="*u8", inv_freq_ptr="*fp32", scale="fp32",
                eps="fp32")  # fmt: skip
    kern = compile_kernel(vf._rope_table_kernel, args, dict(HALF=32, BLOCK_F=32), 1)
    out.append(report("rope_table HALF=32", kern))
    for qk_norm in (False, True):
        const = dict(H=9, HKV=3, D=64, ROT=64, QK_NORM=qk_norm, BLOCK_H=16, BLOCK_HKV=4, BLOCK_D=64)
        kern = compile_kernel(vf._tree_rope_kv_kernel, args, const, 2, divisible=strides)
        out.append(report(f"tree_rope_kv qk_norm={qk_norm}", kern))
        for block_r, block_s, warps, stages in ((16, 64, 4, 4), (16, 128, 8, 3), (32, 64, 4, 3)):
            const = dict(H=9, HKV=3, D=64, ROT=64, QK_NORM=qk_norm, INTERPRET=False, BLOCK_R=block_r, BLOCK_D=64,
                         BLOCK_S=block_s, BLOCK_T=vf.ROPE_TREE_TILE, PDL=True)  # fmt: skip (PDL: as on Hopper)
            kern = compile_kernel(vf._tree_attention_rope_kernel, args, const, warps, stages, divisible=strides)
            out.append(report(f"tree_attention_rope qk_norm={qk_norm} R={block_r} S={block_s} w={warps}", kern))
    return out + check_tree_attention()


def check_tree_attention() -> list[str]:
    """The roped-q tree attention (`tree_attention`, 9 / 3 heads of 64) at its default tiles, and the hybrid's
    prefix-split kernel (`split_tree_attention`) at the Qwen3.6-27B attention shape (24 / 4 heads of 256, gated):
    one launch, 32 chunks, and the drafter's sliding window; both walk the tree with `_attend_tree_slots`."""
    strides = ("stride_q", "stride_cb", "stride_ch", "stride_cs", "stride_o", "stride_g", "stride_gh")
    args = dict(dict.fromkeys(("T", "stride_ab", "stride_ai", "stride_aj", *strides), "i32"), scale="fp32",
                len_ptr="*i64", anc_ptr="*u8", m_ptr="*fp32", l_ptr="*fp32", acc_ptr="*fp32",
                **{n: "*bf16" for n in ("q_ptr", "k_ptr", "v_ptr", "gate_ptr", "out_ptr")})  # fmt: skip
    const = dict(H=9, HKV=3, D=64, INTERPRET=False, BLOCK_R=32, BLOCK_D=64, BLOCK_S=64, PDL=True)
    out = [report("tree_attention R=32 S=64 w=4", compile_kernel(vf._tree_attention_kernel, args, const, 4, 3,
                                                                 divisible=strides))]  # fmt: skip
    sa._sm_count = lambda index: 132  # an H100's SMs: split_launch asks the device, and there is none here
    launch = sa.split_launch(17 * 6, 4, 32768, torch.device("cuda"), 256, torch.bfloat16)
    for name, splits, window in (("one launch", 0, 0), ("32 chunks", 32, 0), ("window 2048", 32, 2048)):
        const = dict(H=24, HKV=4, D=256, INTERPRET=False, BLOCK_R=launch.block_r, BLOCK_D=256, BLOCK_S=launch.block_s,
                     SPLITS=splits, MIN_CHUNK=sa.MIN_CHUNK, GATE=True, WINDOW=window, PDL=True)  # fmt: skip
        kern = compile_kernel(sa._split_attention_kernel, args, const, launch.num_warps, launch.num_stages,
                              divisible=strides)  # fmt: skip
        out.append(report(f"split_attention 27B 17 nodes {name} R={launch.block_r} S={launch.block_s}", kern))
    return out


def sass_lines(kern) -> list[str]:
    """The SASS instructions of a compiled kernel (cuobjdump -sass), one string each."""
    tool = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(kern.asm["cubin"])
        f.flush()
        sass = subprocess.run([str(tool), "-sass", f.name], capture_output=True, text=True).stdout
    return [line.strip() for line in sass.splitlines() if line.strip().startswith("/*") and "*/" in line.strip()[2:8]]


def sass_count(kern) -> int:
    """Static SASS instructions of a compiled kernel."""
    return len(sass_lines(kern))


def loads_before_math(kern) -> str:
    """Global loads before the first FMA / total, static instructions in program order: how many of a GEMV program's
    loads can be in flight at once. A loop's body counts once however often it runs, so a K loop that reduces each
    tile before loading the next shows one tile's loads (e.g. 64/64), not the program's."""
    lines = sass_lines(kern)
    loads = [i for i, line in enumerate(lines) if " LDG" in line]
    first_fma = next((i for i, line in enumerate(lines) if " FFMA" in line), len(lines))
    return f"LDG before the first FFMA {sum(i < first_fma for i in loads)}/{len(loads)}"


def check_gemm_rows() -> list[str]:
    """The verify's row GEMM at SmolLM2's 16-row shapes and tuned tiles (bf16, PDL on as launched on Hopper):
    registers, spills and the static SASS count (the K loop's per-element work shows in it)."""
    out = []
    ptrs = {p: "*bf16" for p in ("x_ptr", "w_ptr", "norm_ptr", "res_ptr", "out_ptr", "nout_ptr")}
    ints = dict.fromkeys(("M", "K", "N_OUT", "HALF", "stride_xm", "stride_wn", "stride_rm", "stride_om",
                          "stride_nm"), "i32")  # fmt: skip
    cases = (("qkv+norm", dict(NORM=True), (32, 256, 4, 3)), ("o+res", dict(RESIDUAL=True), (16, 256, 2, 4)),
             ("gate_up+norm+swiglu", dict(NORM=True, SWIGLU=True), (32, 256, 4, 3)),
             ("down+res", dict(RESIDUAL=True), (16, 256, 2, 4)))  # fmt: skip
    for name, flags, (bn, bk, warps, stages) in cases:
        const = dict(NORM=False, SWIGLU=False, RESIDUAL=False, NORM_OUT=False, INTERPRET=False, BLOCK_M=16,
                     BLOCK_N=bn, BLOCK_K=bk, PDL=True, K_LINES=16 if name != "down+res" else 32)  # fmt: skip
        const.update(flags)
        kern = compile_kernel(dc._gemm_rows_kernel, dict(ptrs, **ints, eps="fp32"), const, warps, stages,
                              divisible=("stride_xm", "stride_wn", "stride_om", "stride_rm"))  # fmt: skip
        out.append(report(f"gemm_rows {name} BN={bn} BK={bk} w={warps} s={stages} SASS={sass_count(kern)}", kern))
    return out


def check_qkv_rope() -> list[str]:
    """The weaver verify's qkv GEMM + RoPE + K/V write launch at SmolLM2's shapes (65 rows, tuned qkv tiles with
    BLOCK_N = head dim 64, bf16, PDL on): registers and spills, with and without qk-norm."""
    ptrs = {p: "*bf16" for p in ("x_ptr", "w_ptr", "norm_ptr", "qkv_ptr", "q_ptr", "k_ptr", "v_ptr", "qn_ptr",
                                 "kn_ptr")}  # fmt: skip
    ptrs.update(len_ptr="*i64", depth_ptr="*i64", inv_freq_ptr="*fp32")
    ints = dict.fromkeys(("M", "K", "T", "S", "stride_xm", "stride_wn", "stride_om", "stride_q", "stride_db",
                          "stride_dj", "stride_cb", "stride_ch", "stride_cs"), "i32")  # fmt: skip
    out = []
    for qk_norm in (False, True):
        const = dict(H=9, HKV=3, D=64, ROT=64, QK_NORM=qk_norm, INTERPRET=False, BLOCK_M=16, BLOCK_K=256, K_LINES=16)
        kern = compile_kernel(qr._qkv_rope_kv_kernel, dict(ptrs, **ints, eps="fp32"), const, 4, 3,
                              divisible=("stride_xm", "stride_wn", "stride_om", "stride_q"))  # fmt: skip
        out.append(report(f"qkv_rope_kv H=9 HKV=3 D=64 qk_norm={qk_norm}", kern))
    return out


def check_commit() -> list[str]:
    """The stacked GDN commit fold at the 27B GDN shape (H=16, HV=48, K=V=128, fp32 state) for each state tile
    `scripts/gpu/gdn_commit_ab.py --tiles` times: registers and spills."""
    args = dict(aux_k="*fp32", aux_delta="*fp32", aux_G="*fp32", path="*i64", h0="*fp32", h_out="*fp32", B="i32",
                T="i32", P="i32", stride_hl="i64")  # fmt: skip
    out = []
    for bk, bv, warps in ((128, 32, 4), (32, 128, 4), (16, 128, 4), (32, 128, 8), (64, 64, 4), (128, 16, 2)):
        const = dict(H=16, HV=48, K=128, V=128, BP=16, BK=bk, BV=bv, USE_H0=True,
                     PREC=precision_code("ieee", torch.float32), INTERPRET=False)  # fmt: skip
        kern = compile_kernel(gc.gdn_commit_kernel, args, const, warps)
        out.append(report(f"gdn_commit BK={bk} BV={bv} warps={warps}", kern))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--T", type=int, nargs="*", default=[16, 32, 64, 128, 256], help="none: no GDN kernels")
    parser.add_argument("--dtype", nargs="+", default=["bf16", "fp32"])
    parser.add_argument("--BV", type=int, nargs="+", default=[])
    parser.add_argument("--warps", type=int, nargs="+", default=[], help="solve kernel warps to try")
    parser.add_argument("--prep-warps", type=int, nargs="+", default=[], help="prep kernel warps to try")
    parser.add_argument("--precision", nargs="+", default=[], help="fp32 product precisions to try")
    parser.add_argument("--BVP", type=int, nargs="+", default=[], help="state item widths to try")
    parser.add_argument("--BT", type=int, nargs="+", default=[])
    parser.add_argument("--split-prep", action="store_true", help="also one prep kernel per item kind")
    parser.add_argument("--left-solve", action="store_true", help="also the left-looking solve")
    parser.add_argument("--topk", action="store_true", help="also the tree builders' top-k kernel")
    parser.add_argument("--node-attention", action="store_true", help="also the Weaver step's attention kernel")
    parser.add_argument("--adapter-gemv", action="store_true", help="also the Weaver step's MLP GEMVs")
    parser.add_argument("--frontier", action="store_true", help="also the device weaver builder's bookkeeping")
    parser.add_argument("--vocab-top1", action="store_true", help="also the greedy top-1 over the vocabulary")
    parser.add_argument("--verify", action="store_true", help="also the tree verify's RoPE / attention launches")
    parser.add_argument("--gemm-rows", action="store_true", help="also the verify's 16-row GEMMs (SASS counts)")
    parser.add_argument("--pool-top", action="store_true", help="also the Weaver step's scoring tail (+ push)")
    parser.add_argument("--decode", action="store_true", help="also the AR step's GEMVs and attention (PDL)")
    parser.add_argument("--gdn-decode", action="store_true", help="also the GDN decode step's kernel")
    parser.add_argument("--gemv-27b", action="store_true", help="also the 27B AR step's GEMVs, with a norm or not")
    parser.add_argument("--gemv-tma", action="store_true", help="also the TMA GEMV at the 27B one-row shapes")
    parser.add_argument("--qkv-rope", action="store_true", help="also the weaver verify's qkv + RoPE + K/V launch")
    parser.add_argument("--commit", action="store_true", help="also the stacked GDN commit fold's state tiles")
    parser.add_argument("--bench-call", action="store_true",
                        help="also the default config as `weaver bench kernels` launches it (no raw gates, no l2norm)")
    args = parser.parse_args()
    print("triton", triton.__version__)
    extras = ((args.topk, check_small_topk), (args.node_attention, check_node_attention),
              (args.adapter_gemv, check_adapter_gemv), (args.frontier, check_weaver_frontier),
              (args.vocab_top1, check_vocab_top1), (args.verify, check_verify),
              (args.gemm_rows, check_gemm_rows), (args.decode, check_decode),
              (args.pool_top, check_pool_top), (args.qkv_rope, check_qkv_rope),
              (args.commit, check_commit), (args.gemv_27b, check_gemv_27b),
              (args.gdn_decode, check_gdn_decode), (args.gemv_tma, check_gemv_tma))  # fmt: skip
    for wanted, check in extras:
        for line in check() if wanted else []:
            print(line, flush=True)
    for T in args.T:
        for dtype in args.dtype:
            base = gt.default_config(T, 128, torch.bfloat16 if dtype == "bf16" else torch.float32)
            cfgs = [base] + [base._replace(BV=bv) for bv in args.BV] + [base._replace(num_warps=w) for w in args.warps]
            cfgs += [base._replace(prep_warps=w) for w in args.prep_warps]
            cfgs += [base._replace(precision=p) for p in args.precision]
            cfgs += [base._replace(BVP=b) for b in args.BVP]
            cfgs += [base._replace(BT=bt) for bt in args.BT]
            cfgs += [base._replace(split_prep=True)] if args.split_prep else []
            cfgs += [base._replace(solve_order="left", lead=False)] + [
                base._replace(solve_order="left", lead=False, BV=bv) for bv in args.BV] if args.left_solve else []
            cfgs += [base._replace(lead=False)] if base.lead else []  # the tiled root beside the lead row
            calls = [(cfg, True) for cfg in cfgs] + ([(base, False)] if args.bench_call else [])
            for cfg, model_call in calls:
                try:
                    for line in check_gdn_tree(T, dtype, cfg, model_call):
                        print(line, flush=True)
                except Exception as e:  # report and go on: one failing shape should not hide the others
                    print(f"T={T} {dtype} {cfg}: FAILED {type(e).__name__}: {str(e)[:400]}", flush=True)


if __name__ == "__main__":
    main()
