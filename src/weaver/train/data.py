"""Prompts for training and the held-out evaluation sets (`weaver data build`).

Evaluation: MT-Bench turn 1 (80), HumanEval (164), 200 gsm_symbolic items at a held-out seed and 200 held-out
ShareGPT first turns. Training: ShareGPT first turns and multi-turn prefixes, gsm_symbolic and other math
generators at training seeds, CodeIO tasks and standard-library code tasks; deterministic for a seed, and no
prompt equal to an evaluation prompt, or sharing its first 64 normalised characters, is ever kept (every turn
of every MT-Bench question counts; the conversations the ShareGPT eval turns come from are dropped whole).
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

from weaver.train import sources

__all__ = ["EVAL_WORKLOADS", "EvalPrompt", "TrainPrompt", "build_training_prompts", "eval_prompts", "normalise",
           "read_prompts", "write_prompts"]

EVAL_WORKLOADS = ("mt-bench", "humaneval", "gsm_symbolic", "sharegpt")
EVAL_GSM_SEED, EVAL_SIZE = 10_001, 200
TRAIN_GSM_SEEDS = (1, 2, 3)
PREFIX = 64
MAX_CHARS = 6000
DEFAULT_MIX = {"sharegpt": 0.55, "gsm_symbolic": 0.12, "math": 0.08, "codeio": 0.1, "stdlib": 0.15}
MATH_GENERATORS = ("basic_arithmetic", "simple_equations", "chain_sum")


@dataclass(frozen=True)
class EvalPrompt:
    id: str
    workload: str
    text: str  # the user message

    @property
    def messages(self) -> list[dict]:
        return [{"role": "user", "content": self.text}]


@dataclass(frozen=True)
class TrainPrompt:
    id: str
    source: str
    messages: list[dict] = field(default_factory=list)  # ends with the user turn the target answers


def normalise(text: str) -> str:
    """Lowercase, punctuation dropped, whitespace collapsed: the form the leak checks compare."""
    return " ".join(re.sub(r"[^\w\s]", " ", text.lower()).split())


def _sharegpt_split() -> tuple[list[tuple[str, list[dict]]], set[str]]:
    """(training conversations, ids of the eval conversations): 200 first turns of 10..2000 chars, fixed seed."""
    convs = sources.sharegpt_conversations()
    eligible = [c for c in convs if 10 <= len(c[1][0]["content"]) <= 2000]
    held = {cid for cid, _ in random.Random(12_345).sample(eligible, EVAL_SIZE)}
    return [c for c in convs if c[0] not in held], held


def eval_prompts(workload: str, limit: int | None = None) -> list[EvalPrompt]:
    """The held-out prompts of one workload (EVAL_WORKLOADS), in a fixed order; the first `limit`."""
    if workload == "mt-bench":
        out = [EvalPrompt(f"mtbench-{qid}", workload, turns[0]) for qid, turns in sources.mtbench_questions()]
    elif workload == "humaneval":
        out = [EvalPrompt(tid, workload, "Complete the following Python function. Reply with the full function "
                          f"in a ```python block.\n\n```python\n{p}```") for tid, p in sources.humaneval_problems()]
    elif workload == "gsm_symbolic":
        qs = sources.gym_items("gsm_symbolic", EVAL_SIZE, EVAL_GSM_SEED)
        out = [EvalPrompt(f"gsm-{i}", workload, q) for i, q in enumerate(qs)]
    elif workload == "sharegpt":
        convs = {cid: m for cid, m in sources.sharegpt_conversations()}
        _, held = _sharegpt_split()
        out = [EvalPrompt(f"sharegpt-{cid}", workload, convs[cid][0]["content"]) for cid in sorted(held)]
    else:
        raise ValueError(f"unknown workload {workload!r}; known: {', '.join(EVAL_WORKLOADS)}")
    return out[:limit]


def _eval_keys() -> tuple[set[str], set[str]]:
    """Normalised texts and 64-character prefixes of every evaluation prompt (all MT-Bench turns)."""
    texts = [p.text for w in ("humaneval", "gsm_symbolic", "sharegpt") for p in eval_prompts(w)]
    texts += [t for _, turns in sources.mtbench_questions() for t in turns]
    texts += [p for _, p in sources.humaneval_problems()]  # the bare problem too, not only our wrapping
    norm = {normalise(t) for t in texts}
    return norm, {n[:PREFIX] for n in norm}


def leaks(text: str, keys: tuple[set[str], set[str]]) -> bool:
    """Whether a user text equals, or shares the first 64 normalised characters of, an evaluation prompt."""
    n = normalise(text)
    return n in keys[0] or n[:PREFIX] in keys[1]


def build_training_prompts(seed: int = 0, max_prompts: int | None = None,
                           mix: dict[str, float] | None = None) -> list[TrainPrompt]:
    """Training prompts from every source in proportions `mix` (of max_prompts; all available if None),
    shuffled with `seed`, de-duplicated, and never an evaluation prompt (module docstring)."""
    mix = mix or DEFAULT_MIX
    rng = random.Random(seed)
    pools: dict[str, list[TrainPrompt]] = {}
    convs, _ = _sharegpt_split()
    share = []
    for cid, turns in convs:
        users = [i for i, t in enumerate(turns) if t["role"] == "user"]
        end = users[0] if rng.random() < 0.6 or len(users) == 1 else rng.choice(users)  # first turn or a prefix
        msgs = turns[: end + 1]
        while sum(len(m["content"]) for m in msgs) > MAX_CHARS and len(msgs) > 1:
            msgs = msgs[2:]  # drop the oldest exchange
        if msgs[0]["role"] == "user" and len(msgs[-1]["content"]) <= MAX_CHARS:
            share.append(TrainPrompt(f"sharegpt-{cid}-{end}", "sharegpt", msgs))
    pools["sharegpt"] = share
    gsm = [q for s in TRAIN_GSM_SEEDS for q in sources.gym_items("gsm_symbolic", 1000, s)]
    pools["gsm_symbolic"] = [TrainPrompt(f"gsm-train-{i}", "gsm_symbolic", [_user(q)]) for i, q in enumerate(gsm)]
    pools["math"] = [TrainPrompt(f"{g}-{i}", "math", [_user(q)]) for g in MATH_GENERATORS
                     for i, q in enumerate(sources.gym_items(g, 500, 7))]
    pools["codeio"] = [TrainPrompt(f"codeio-{i}", "codeio", [_user(q)]) for i, q in enumerate(sources.codeio_tasks())]
    pools["stdlib"] = [TrainPrompt(f"stdlib-{i}", "stdlib", [_user(q)])
                       for i, q in enumerate(sources.stdlib_code_tasks())]
    keys = _eval_keys()
    seen: set[str] = set()
    out: list[TrainPrompt] = []
    for name in sorted(mix):
        pool = pools.get(name)
        if pool is None:
            raise ValueError(f"unknown source {name!r} in mix; known: {', '.join(sorted(pools))}")
        pool = list(pool)
        rng.shuffle(pool)
        want = len(pool) if max_prompts is None else round(mix[name] * max_prompts)
        taken = 0
        for p in pool:
            if taken >= want:
                break
            text = p.messages[-1]["content"]
            key = normalise(text)
            if key in seen or any(leaks(m["content"], keys) for m in p.messages if m["role"] == "user"):
                continue
            seen.add(key)
            out.append(p)
            taken += 1
    rng.shuffle(out)
    return out


def _user(text: str) -> dict:
    return {"role": "user", "content": text}


def write_prompts(path: str | Path, prompts: list[TrainPrompt] | list[EvalPrompt]) -> str:
    """JSONL, one prompt a line (with its messages); returns the file's sha256."""
    lines = []
    for p in prompts:
        rec = asdict(p)
        rec["messages"] = p.messages
        lines.append(json.dumps(rec))  # ASCII: no U+2028 inside a line
    data = ("\n".join(lines) + "\n").encode()
    Path(path).write_bytes(data)
    return hashlib.sha256(data).hexdigest()


def read_prompts(path: str | Path) -> list[TrainPrompt]:
    return [TrainPrompt(r["id"], r["source"], r["messages"])
            for r in map(json.loads, filter(None, Path(path).read_text(encoding="utf-8").split("\n")))]
