"""Record the Triton launch sequence of the fused decode, verify and draft passes, to compare two versions.

    PYTHONPATH=src python scripts/fused_launches.py --out /tmp/head.txt
    PYTHONPATH=/tmp/base/src python scripts/fused_launches.py --out /tmp/base.txt && diff /tmp/base.txt /tmp/head.txt

Runs FastDecoder, FastVerifier (a 17-node chain, a 65-node tree) and FastDrafter on tiny random models, under
Triton's interpreter on a machine without CUDA. Three levels are written, one line each, in call order:

    call    a public launcher of weaver.kernels.triton: its positional and keyword arguments
    config  what the launcher asks to pick its launch (tile helpers, the tuning table, PDL), with the answer
            the same helper gives for a CUDA device and the packaged H200 tuning table, so the GPU's tiles
            and PDL requests are on record although the run is on CPU
    kernel  each Triton kernel launch: grid, every argument, constexprs and launch options

A tensor is written as its buffer (a parameter, cache or buffer by name; else t<k>, numbered by first use),
storage offset, shape, stride and dtype, so the record also shows which launch reads what another wrote.
--dry skips the kernels' bodies (outputs stay uninitialised): the sequence has no data-dependent branch.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


class Recorder:
    """Lines of the record, and the names of the tensors the passes read."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.names: dict[int, str] = {}  # storage data_ptr -> name
        self.keep: list[torch.Tensor] = []  # temporaries stay alive, so no address is reused by another one
        self.alive: list[object] = []  # every model and cache too: no later buffer takes a named address
        self.depth = 0

    def name(self, module: torch.nn.Module, prefix: str) -> None:
        """Name the buffers of a module's fused weights (first: their parameters are views), parameters, buffers."""
        for n, sub in module.named_modules():
            for attr in ("context_kv", "fused", "fused_kv"):
                fused = getattr(sub, attr, None)
                if fused is not None and hasattr(fused, "weight"):
                    self.names.setdefault(fused.weight.untyped_storage().data_ptr(), f"{prefix}{n}.{attr}")
        for n, t in [*module.named_parameters(), *module.named_buffers()]:
            self.names.setdefault(t.untyped_storage().data_ptr(), f"{prefix}{n}")

    def tensor(self, t: torch.Tensor, name: str) -> None:
        """Name t's buffer (the first name wins: the layers' caches are views of one buffer, told by offset)."""
        self.names.setdefault(t.untyped_storage().data_ptr(), name)
        self.alive.append(t)

    def fmt(self, v) -> str:
        if isinstance(v, torch.Tensor):
            ptr = v.untyped_storage().data_ptr()
            if ptr not in self.names:
                self.names[ptr] = f"t{len(self.keep)}"
                self.keep.append(v)
            return (f"{self.names[ptr]}@{v.storage_offset()}{list(v.shape)}/{list(v.stride())}:"
                    f"{str(v.dtype).removeprefix('torch.')}")  # fmt: skip
        if isinstance(v, torch.device):
            return f"device:{v.type}"
        if isinstance(v, (tuple, list)):
            return "(" + ", ".join(self.fmt(x) for x in v) + ")"
        if isinstance(v, torch.dtype):
            return str(v).removeprefix("torch.")
        if callable(v) and hasattr(v, "__name__"):
            return f"<{v.__name__}>"
        return repr(v)

    def line(self, kind: str, text: str) -> None:
        self.lines.append("  " * self.depth + f"{kind} {text}")


REC = Recorder()


def _args(args, kwargs) -> str:
    parts = [REC.fmt(a) for a in args] + [f"{k}={REC.fmt(v)}" for k, v in sorted(kwargs.items())]
    return ", ".join(parts)


def patch(dry: bool) -> None:
    """Wrap the launchers, the launch-configuration helpers and the Triton kernel launch."""
    import importlib

    import weaver.kernels.triton as kt

    decode, tree_attention, tuning = (importlib.import_module(f"weaver.kernels.triton.{name}")
                                      for name in ("decode", "tree_attention", "tuning"))  # fmt: skip

    launchers = ["fused_gemv", "decode_attention", "tree_attention", "tree_attention_rope", "rope_table",
                 "tree_rope_kv_write", "qkv_rope_kv"]  # fmt: skip
    for name in launchers:
        real = getattr(kt, name)

        def call(*args, _real=real, _name=name, **kwargs):
            REC.line("call", f"{_name}({_args(args, kwargs)})")
            REC.depth += 1
            try:
                return _real(*args, **kwargs)
            finally:
                REC.depth -= 1

        setattr(kt, name, call)

    cuda = torch.device("cuda")
    for helper in ("gemv_config", "gemm_rows_config"):  # pure functions of the shape and device.type
        real = getattr(decode, helper)

        def config(n_out, k, rows, device, _real=real, _name=helper):
            out = _real(n_out, k, rows, device)
            REC.line("config", f"{_name}({n_out}, {k}, {rows}, {device.type}) = {tuple(out)}; "
                               f"cuda: {tuple(_real(n_out, k, rows, cuda))}")  # fmt: skip
            return out

        setattr(decode, helper, config)

    real_tuned = tuning.tuned
    h200 = tuning._table(str(tuning.PACKAGED["H200"]))

    def tuned(kernel, key):
        out = real_tuned(kernel, key)
        gpu = h200.get(kernel, {}).get(key, {}).get("config")
        REC.line("config", f"tuned({kernel!r}, {key!r}) = {out}; h200: {gpu}")
        return out

    tuning.tuned = tuned
    for module in (decode, tree_attention):
        real_pdl = module.pdl_launch

        def pdl(device, itemsize=2, kernel="", _real=real_pdl):
            out = _real(device, itemsize, kernel)
            REC.line("config", f"pdl_launch({device.type}, itemsize={itemsize}, kernel={kernel!r}) = {out}")
            return out

        module.pdl_launch = pdl

    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        from triton.runtime.interpreter import InterpretedFunction as Kernel
    else:
        from triton.runtime.jit import JITFunction as Kernel
    real_run = Kernel.run

    @functools.wraps(real_run)
    def run(self, *args, grid, warmup, **kwargs):
        if not warmup:
            name = getattr(self, "__name__", None) or self.fn.__name__
            REC.line("kernel", f"{name}[{REC.fmt(grid)}]({_args(args, kwargs)})")
            if dry:
                return None
        return real_run(self, *args, grid=grid, warmup=warmup, **kwargs)

    Kernel.run = run


def target(preset: str, dtype: str, **overrides):
    import weaver
    from weaver.models.presets import preset_config

    cfg = preset_config(preset, **overrides)
    model = weaver.LLM.from_config(cfg, seed=5, device="cpu" if not torch.cuda.is_available() else "cuda",
                                   dtype=dtype).model  # fmt: skip
    REC.name(model, "")
    REC.alive.append(model)
    return model


def filled_cache(model, lengths: list[int], capacity: int):
    cache = model.allocate_cache(len(lengths), capacity)
    gen = torch.Generator().manual_seed(0)
    prompt = torch.randint(0, model.config.vocab_size, (len(lengths), max(lengths)), generator=gen)
    model(prompt.to(model.device), cache)
    cache.lengths.copy_(torch.tensor(lengths))
    for layer in cache.layers:
        REC.tensor(layer.k, "cache.k")
        REC.tensor(layer.v, "cache.v")
    REC.tensor(cache.lengths, "cache.lengths")
    return cache


@torch.no_grad()
def record_decode(preset: str, dtype: str, lengths: tuple[int, ...] = (7, 3)) -> None:
    from weaver.models.fast_decode import FastDecoder

    model = target(preset, dtype)
    cache = filled_cache(model, list(lengths), 96)
    REC.line("case", f"decode {preset} B={len(lengths)}")
    FastDecoder(model)(torch.arange(11, 11 + len(lengths), device=model.device)[:, None], cache)


def random_parents(n: int, seed: int) -> list[int]:
    gen = torch.Generator().manual_seed(seed)
    return [-1] + [int(torch.randint(0, j, (1,), generator=gen)) for j in range(1, n)]


@torch.no_grad()
def record_verify(
    preset: str, dtype: str, nodes: int, chain: bool, lengths: tuple[int, ...] = (9, 5), **overrides
) -> None:
    from weaver.models.fast_verify import FastVerifier
    from weaver.ops.tree import node_depth
    from weaver.speculative.tree import DraftTree

    model = target(preset, dtype, **overrides)
    b = len(lengths)
    cache = filled_cache(model, list(lengths), 160)
    dev = model.device
    REC.line("case", f"verify {preset} {overrides} {'chain' if chain else 'tree'} T={nodes} B={b}")
    verifier = FastVerifier(model)
    if chain:  # as the round verifies a chain: the DraftTree's (expanded) ancestor mask
        drafts = torch.arange(10, 10 + b * (nodes - 1), device=dev).view(b, nodes - 1) % model.config.vocab_size
        tree = DraftTree.chain(torch.arange(3, 3 + b, device=dev), drafts)
        verifier(tree.tokens, cache, tree.parents, tree.depth, capture_layers=(0, 2), ancestors=tree.ancestor_mask())
    else:
        parents = torch.tensor([random_parents(nodes, 1 + i) for i in range(b)], device=dev)
        tokens = torch.arange(b * nodes, device=dev).view(b, nodes) % model.config.vocab_size
        verifier(tokens, cache, parents, node_depth(parents), capture_layers=(1,))


@torch.no_grad()
def record_draft(
    dtype: str, block_size: int, causal: bool, preset: str = "tiny-qwen3", lengths: tuple[int, ...] = (11, 6)
) -> None:
    from weaver.speculative.drafter import DFlashDrafter
    from weaver.speculative.fast_drafter import FastDrafter

    model = target(preset, dtype)
    drafter = DFlashDrafter.random(model.config, num_layers=2, num_target_features=3, block_size=block_size, seed=3,
                                   device=model.device, dtype=model.dtype)  # fmt: skip
    if causal:
        drafter.config.is_causal = True
    drafter.fuse_projections()
    REC.name(drafter, "drafter.")
    REC.alive.append(drafter)
    b = len(lengths)
    ctx = drafter.new_context(b, 24)
    gen = torch.Generator().manual_seed(4)
    features = torch.randn(b, max(lengths), drafter.config.num_target_features * model.config.hidden_size,
                           generator=gen)  # fmt: skip
    drafter.append_context(ctx, features.to(model.device), torch.tensor(lengths, device=model.device))
    REC.tensor(ctx.stacked[0], "ctx.k")
    REC.tensor(ctx.stacked[1], "ctx.v")
    REC.tensor(ctx.lengths, "ctx.lengths")
    REC.line("case", f"draft {preset} Bk={block_size} causal={causal} B={b}")
    fast = FastDrafter(drafter, model.lm_head)
    fast(ctx, torch.arange(3, 3 + b, device=model.device), model.model.embed_tokens, model.lm_head)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="file to write the record to")
    parser.add_argument("--dtype", default="bf16", help="model dtype (bf16 as on the GPU)")
    parser.add_argument("--dry", action="store_true", help="record without running the kernels' bodies")
    parser.add_argument("--smollm2", action="store_true", help="also SmolLM2-135M shapes at batch 1 (the shapes of "
                        "the packaged H200 tuning table; slow unless --dry)")  # fmt: skip
    args = parser.parse_args()
    torch.set_num_threads(1)
    patch(args.dry)
    for preset in ("tiny-llama", "tiny-qwen3"):
        record_decode(preset, args.dtype)
        record_verify(preset, args.dtype, 17, chain=True)
        record_verify(preset, args.dtype, 65, chain=False)
    record_verify("tiny-llama", args.dtype, 65, chain=False, head_dim=12)  # a head dim qkv_rope_kv cannot tile
    record_verify("tiny-llama", args.dtype, 32, chain=False)  # both sides of ROPE_ATTENTION_MAX_NODES
    record_verify("tiny-llama", args.dtype, 33, chain=False)
    record_draft(args.dtype, 16, causal=False)
    record_draft(args.dtype, 16, causal=True)
    record_draft(args.dtype, 40, causal=False)  # past ROPE_ATTENTION_MAX_NODES: RoPE + K/V write apart
    if args.smollm2:
        record_decode("smollm2-shape", args.dtype, lengths=(40,))
        record_verify("smollm2-shape", args.dtype, 17, chain=True, lengths=(40,))
        record_verify("smollm2-shape", args.dtype, 65, chain=False, lengths=(40,))
        record_draft(args.dtype, 16, causal=False, preset="smollm2-shape", lengths=(20,))
    with open(args.out, "w") as f:
        f.write("\n".join(REC.lines) + "\n")
    kernels = sum(line.lstrip().startswith("kernel ") for line in REC.lines)
    print(f"{len(REC.lines)} lines, {kernels} kernel launches -> {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
