"""`weaver train drafter|weaver` and `weaver data regenerate`: the trainers' command lines.

    weaver data regenerate --prompts data/train_prompts.jsonl --out data/regen --batch-size 512
    weaver train drafter --data data/regen --out runs/drafter --steps 2000
    torchrun --nproc_per_node 8 -m weaver.cli train drafter --data data/regen --out runs/drafter
    weaver train weaver --data data/regen --drafter runs/drafter/final --out runs/weaver --steps 2000
Heavy imports stay inside the command functions so `weaver --help` stays fast.
"""

from __future__ import annotations

import argparse
import json
import sys

from weaver.argtypes import positive_int

__all__ = ["add_regenerate_parser", "add_train_commands"]


def _add_target_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default="smollm2", help="target: registry name or HF-format directory")
    p.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    p.add_argument("--dtype", default=None, help="target dtype: bf16 (default on cuda) or fp32")


def add_regenerate_parser(data_sub) -> None:
    """`weaver data regenerate`: the target answers the training prompts, written as token shards."""
    p = data_sub.add_parser("regenerate", help="let the target write the replies the trainers learn from")
    p.add_argument("--prompts", required=True, help="train_prompts.jsonl from `weaver data build`")
    p.add_argument("--out", required=True, help="directory of shard_*.npz (a rerun resumes)")
    _add_target_arguments(p)
    p.add_argument("--batch-size", type=positive_int, default=256)
    p.add_argument("--max-new-tokens", type=positive_int, default=512)
    p.add_argument("--max-prompt-tokens", type=positive_int, default=512, help="longer prompts are skipped")
    p.add_argument("--sampled-fraction", type=float, default=0.5, help="share answered by sampling at T=1")
    p.add_argument("--shard-size", type=positive_int, default=2048, help="prompts per shard (the resume unit)")
    p.add_argument("--limit", type=positive_int, default=None, help="the first N prompts only")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-seconds", type=float, default=None, help="start no new shard after this long")
    p.set_defaults(func=_cmd_regenerate)


def _cmd_regenerate(args: argparse.Namespace) -> int:
    import torch

    from weaver.llm import resolve_device, resolve_dtype
    from weaver.models.registry import resolve_model_dir
    from weaver.train.regenerate import RegenerateConfig, regenerate

    try:
        cfg = RegenerateConfig(batch_size=args.batch_size, max_new_tokens=args.max_new_tokens,
                               max_prompt_tokens=args.max_prompt_tokens, sampled_fraction=args.sampled_fraction,
                               shard_size=args.shard_size, limit=args.limit, seed=args.seed,
                               max_seconds=args.max_seconds)
    except ValueError as exc:
        return _usage(str(exc))
    device = resolve_device(args.device)
    dtype = resolve_dtype(args.dtype, device)
    summary = regenerate(resolve_model_dir(args.model), args.prompts, args.out, cfg, device=str(device),
                         dtype=dtype if isinstance(dtype, torch.dtype) else torch.bfloat16)
    print(json.dumps(summary))
    return 0


def add_train_commands(sub) -> None:
    """`weaver train drafter` and `weaver train weaver`."""
    from weaver.train.loop import add_train_arguments

    p = sub.add_parser("train", help="train a DFlash drafter or a Weaver adapter for a target")
    tsub = p.add_subparsers(dest="train_cmd", required=True)
    d = tsub.add_parser("drafter", help="the DFlash block drafter (target frozen, run online)")
    d.add_argument("--data", required=True, help="directory of regenerated shards")
    _add_target_arguments(d)
    d.add_argument("--layers", type=positive_int, default=3, help="drafter layers (width = the target's)")
    d.add_argument("--features", type=positive_int, default=5, help="tapped target layers, spread over [1, L-3]")
    d.add_argument("--block-size", type=positive_int, default=16)
    d.add_argument("--anchors", type=positive_int, default=64, help="random anchors per sequence and step (<= 512)")
    d.add_argument("--gamma", type=float, default=7.0, help="CE weight exp(-(k-1)/gamma) at block row k")
    d.add_argument("--batch-size", type=positive_int, default=16, help="sequences per device and micro-step")
    d.add_argument("--max-len", type=positive_int, default=1024, help="sequences are cut to this many tokens")
    d.add_argument("--init", default="random", choices=["random", "target"],
                   help="random (the recipe), or start the layers as copies of the target's top layers")
    d.add_argument("--init-from", default=None, metavar="DIR",
                   help="start from this trained drafter's weights (its shape wins over --layers/--features)")
    d.add_argument("--grow-to", type=positive_int, default=None, metavar="LAYERS",
                   help="with --init-from: append layers up to this many, each the identity at first")
    add_train_arguments(d)
    d.set_defaults(func=_cmd_train_drafter)
    w = tsub.add_parser("weaver", help="the Weaver adapter (target and drafter frozen)")
    w.add_argument("--data", required=True, help="directory of regenerated shards")
    w.add_argument("--drafter", required=True, help="the trained drafter's directory")
    _add_target_arguments(w)
    w.add_argument("--d-rank", type=positive_int, default=512)
    w.add_argument("--heads", type=positive_int, default=8)
    w.add_argument("--mlp-dim", type=positive_int, default=1024)
    w.add_argument("--pool-size", type=positive_int, default=512, help="K: the drafter's top-K per depth")
    w.add_argument("--variant", default="released", choices=["released", "learned"],
                   help="released: RoPE + SwiGLU (the authors' checkpoint); learned: pos_emb + GELU")
    w.add_argument("--loss", default="kl", choices=["kl", "lk"], help="kl, or lk = KL + TV (acceptance)")
    w.add_argument("--tv-weight", type=float, default=1.0)
    w.add_argument("--greedy-weight", type=float, default=0.0,
                   help="add this x the CE of the target's greedy token along greedy chains (greedy trees)")
    w.add_argument("--anchors", type=positive_int, default=16, help="chains per sequence and step")
    w.add_argument("--batch-size", type=positive_int, default=16)
    w.add_argument("--max-len", type=positive_int, default=1024)
    w.add_argument("--init-from", default=None, metavar="DIR",
                   help="start from this trained adapter's weights (its shape wins over --d-rank/--heads/...)")
    w.add_argument("--grow-layers", type=positive_int, default=None, metavar="N",
                   help="with --init-from: append blocks up to N, each the identity at first")
    w.add_argument("--grow-mlp", type=positive_int, default=None, metavar="M",
                   help="with --init-from: widen the MLPs to M hidden units (new units start with no effect)")
    add_train_arguments(w)
    w.set_defaults(func=_cmd_train_weaver)


def _load_target(args: argparse.Namespace):
    """The frozen target on this process's device (cuda:LOCAL_RANK under torchrun)."""
    import weaver
    from weaver.options import distributed_env

    device = args.device
    env = distributed_env()
    if device in (None, "cuda") and _cuda():
        device = f"cuda:{env.local_rank if env else 0}"
    return weaver.LLM(args.model, device=device, dtype=args.dtype).model


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def _cmd_train_drafter(args: argparse.Namespace) -> int:
    from weaver.train.drafter_task import DrafterTask, DrafterTaskConfig
    from weaver.train.loop import train, train_config
    from weaver.train.shards import SequenceStore
    from weaver.train.warm_start import drafter_init, grow_drafter

    if args.grow_to is not None and not args.init_from:
        raise SystemExit("error: --grow-to needs --init-from (the trained drafter to grow)")
    cfg = train_config(args)
    target = _load_target(args)
    drafter = None
    layers, features = args.layers, args.features
    if args.init_from:
        drafter = drafter_init(args.init_from, target, args.block_size)
        if args.grow_to is not None:
            drafter = grow_drafter(drafter, args.grow_to, seed=cfg.seed)
        layers, features = drafter.config.num_hidden_layers, len(drafter.config.target_layer_ids)
    task_cfg = DrafterTaskConfig(num_layers=layers, num_target_features=features,
                                 block_size=args.block_size, anchors=args.anchors, gamma=args.gamma,
                                 batch_size=args.batch_size, grad_accum=cfg.grad_accum, max_len=args.max_len,
                                 init=args.init, init_from=args.init_from, seed=cfg.seed)
    store = SequenceStore(args.data, max_len=args.max_len, seed=cfg.seed)
    result = train(DrafterTask(target, store, task_cfg, drafter=drafter), cfg)
    print(json.dumps({"step": result.step, "loss": result.loss, "out": str(cfg.out_dir)}))
    return 0


def _cmd_train_weaver(args: argparse.Namespace) -> int:
    from weaver.speculative.drafter import DFlashDrafter
    from weaver.train.loop import train, train_config
    from weaver.train.shards import SequenceStore
    from weaver.train.warm_start import adapter_init, grow_adapter
    from weaver.train.weaver_task import WeaverTask, WeaverTaskConfig

    if (args.grow_layers is not None or args.grow_mlp is not None) and not args.init_from:
        raise SystemExit("error: --grow-layers / --grow-mlp need --init-from (the trained adapter to grow)")
    cfg = train_config(args)
    task_cfg = WeaverTaskConfig(d_rank=args.d_rank, num_heads=args.heads, mlp_dim=args.mlp_dim,
                                pool_size=args.pool_size, variant=args.variant, loss=args.loss,
                                tv_weight=args.tv_weight, greedy_weight=args.greedy_weight, anchors=args.anchors,
                                batch_size=args.batch_size, grad_accum=cfg.grad_accum, max_len=args.max_len,
                                init_from=args.init_from, seed=cfg.seed)
    target = _load_target(args)
    drafter = DFlashDrafter.from_pretrained(args.drafter)
    adapter = adapter_init(args.init_from, target, drafter) if args.init_from else None
    if adapter is not None and (args.grow_layers is not None or args.grow_mlp is not None):
        adapter = grow_adapter(adapter, args.grow_layers, args.grow_mlp, seed=cfg.seed)
    store = SequenceStore(args.data, max_len=args.max_len, seed=cfg.seed)
    result = train(WeaverTask(target, drafter, store, task_cfg, adapter=adapter), cfg)
    print(json.dumps({"step": result.step, "loss": result.loss, "out": str(cfg.out_dir)}))
    return 0


def _usage(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 2
