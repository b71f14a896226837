"""`weaver data ...`: build the prompt files for training and the held-out evaluation sets.

    weaver data build --out data/prompts --seed 0 --max-prompts 20000
    weaver data eval humaneval --limit 5
Heavy modules are imported inside the commands, so `weaver --help` stays fast.
"""

from __future__ import annotations

import argparse
import json
import sys

from weaver.argtypes import positive_int


def add_data_commands(sub) -> argparse._SubParsersAction:
    """Add the `data` group to the top-level subparsers; return its own subparsers for later commands."""
    p = sub.add_parser("data", help="training prompts and held-out evaluation sets")
    dsub = p.add_subparsers(dest="data_cmd", required=True)

    b = dsub.add_parser("build", help="write train_prompts.jsonl, eval/<workload>.jsonl and manifest.json")
    b.add_argument("--out", required=True, help="output directory (created if missing)")
    b.add_argument("--seed", type=int, default=0, help="seed of the training mix and order (default 0)")
    b.add_argument("--max-prompts", type=positive_int, default=None,
                   help="number of training prompts (default: everything every source has)")
    b.add_argument("--quiet", action="store_true", help="no progress bars")
    b.set_defaults(func=_cmd_build)

    e = dsub.add_parser("eval", help="print (or write) one held-out evaluation set as JSONL")
    e.add_argument("workload", help="mt-bench, humaneval, gsm_symbolic or sharegpt")
    e.add_argument("--limit", type=positive_int, default=None, help="only the first N prompts")
    e.add_argument("--out", default=None, help="write to this file instead of stdout")
    e.set_defaults(func=_cmd_eval)

    t = dsub.add_parser("token-map", help="the N tokens the target writes most: a draft vocabulary (--draft-vocab)")
    t.add_argument("--data", default=None, help="a `weaver data regenerate` directory: count the reply tokens")
    t.add_argument("--prompts", default=None, help="or a prompts JSONL (.gz too): count the messages' tokens")
    t.add_argument("--model", default="smollm2", help="the target (its vocabulary, tokenizer and EOS)")
    t.add_argument("--size", type=positive_int, required=True, help="tokens kept (EOS always among them)")
    t.add_argument("--out", required=True, help="the token map to write (.safetensors)")
    t.add_argument("--quiet", action="store_true", help="no progress bars")
    t.set_defaults(func=_cmd_token_map)
    return dsub


def _cmd_token_map(args: argparse.Namespace) -> int:
    from weaver.train.token_map import cmd_token_map

    return cmd_token_map(args)


def _cmd_build(args: argparse.Namespace) -> int:
    from weaver.train.data import write_data_dir

    m = write_data_dir(args.out, seed=args.seed, max_prompts=args.max_prompts, progress=not args.quiet)
    print(f"[weaver] {m['train_prompts']} training prompts (seed {m['seed']}) -> {args.out}/train_prompts.jsonl")
    for source, n in m["counts"].items():
        removed = m["removed_eval_matches"].get(source, 0)
        dups = m["removed_duplicates"].get(source, 0)
        print(f"  {source:<15} {n:>7}   (dropped: {removed} matching an eval prompt, {dups} duplicates)")
    evals = ", ".join(f"{w} {n}" for w, n in m["eval_counts"].items())
    print(f"[weaver] eval sets -> {args.out}/eval/: {evals}")
    print(f"[weaver] manifest -> {args.out}/manifest.json")
    return 0


def _cmd_eval(args: argparse.Namespace) -> int:
    import dataclasses

    from weaver.train.data import eval_prompts, write_prompts

    prompts = eval_prompts(args.workload, limit=args.limit)
    if args.out:
        print(f"[weaver] {len(prompts)} {args.workload} prompts -> {write_prompts(args.out, prompts)}")
    else:
        for p in prompts:
            sys.stdout.write(json.dumps(dataclasses.asdict(p), ensure_ascii=False) + "\n")
    return 0
