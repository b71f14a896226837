"""Prompt data: the four held-out evaluation sets and the training prompts the target will answer.

Evaluation sets (fixed, independent of any training seed):
    mt-bench      turn 1 of the 80 MT-Bench questions
    humaneval     the 164 HumanEval problems, wrapped in a "complete this function" instruction
    gsm_symbolic  200 reasoning-gym `gsm_symbolic` word problems at seed 10_001 (item i from Random(10_001 + i))
    sharegpt      200 first human turns of 10..2000 chars, sampled with a fixed seed

Training prompts mix six sources (`TRAIN_SOURCES`): ShareGPT first turns, ShareGPT multi-turn prefixes ending on
a user turn, gsm_symbolic and other reasoning-gym math at seeds from 1_000_000 up, CodeI/O tasks and stdlib code
tasks. No evaluation prompt is ever trained on: a training prompt is dropped when any of its user turns, once
normalised (lowercase, punctuation dropped, whitespace collapsed), equals an evaluation text or shares its first
64 characters with one. The evaluation texts are all 80 MT-Bench questions (both turns), the 164 HumanEval
prompts (wrapped and bare), the 200 gsm items and the 200 ShareGPT turns; the ShareGPT dialogues those turns
come from (every part of them) are left out of training altogether.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from random import Random

from weaver.errors import DataError, UnknownWorkloadError
from weaver.train import sources

EVAL_WORKLOADS = ("mt-bench", "humaneval", "gsm_symbolic", "sharegpt")
EVAL_GSM_SEED = 10_001
EVAL_GSM_SIZE = 200
EVAL_SHAREGPT_SEED = 20_017
EVAL_SHAREGPT_SIZE = 200
EVAL_SHAREGPT_CHARS = (10, 2000)
HUMANEVAL_INSTRUCTION = "Complete the following Python function. Reply with the full function in a ```python block."

TRAIN_SOURCES = ("sharegpt", "sharegpt_multi", "gsm_symbolic", "math", "codeio", "stdlib_code", "stdlib_stub")
DEFAULT_MIX = {"sharegpt": 0.27, "sharegpt_multi": 0.22, "gsm_symbolic": 0.14, "math": 0.07, "codeio": 0.09,
               "stdlib_code": 0.11, "stdlib_stub": 0.10}
# Complete-this-function prompts around a stdlib stub; worded unlike HUMANEVAL_INSTRUCTION (no evaluation text is
# trained on), each prompt takes one at random so that no single wording is learnt.
STUB_INSTRUCTIONS = (
    "Implement the Python function below. Answer with the complete function in a ```python block.",
    "Finish this Python function and give the whole function back in a ```python block.",
    "Write the body of the following function. Reply with the full function inside a ```python block.",
)
MATH_GENERATORS = ("basic_arithmetic", "simple_equations", "complex_arithmetic")
GSM_POOL = 10_000  # training gsm_symbolic items per seed (generated on demand, so a small build costs little)
MATH_POOL = 2_000  # per generator of MATH_GENERATORS
GENERATED_CHUNK = 128  # items per reasoning-gym call: small builds generate little past their quota
TRAIN_SEED_STRIDE = 1_000_000  # training seed s draws reasoning-gym items from Random((s + 1) * stride + i)
MAX_PROMPT_CHARS = 6000  # whole prompt, context included
TRAIN_FIRST_TURN_CHARS = (10, MAX_PROMPT_CHARS)
PREFIX_CHARS = 64

Message = dict[str, str]


@dataclass(frozen=True)
class EvalPrompt:
    """One held-out prompt of a benchmark workload; `text` is its first user message."""

    id: str
    workload: str
    messages: list[Message]
    text: str


@dataclass(frozen=True)
class TrainPrompt:
    """A conversation up to and including the user turn whose reply the target will regenerate."""

    id: str
    source: str
    messages: list[Message]


@dataclass
class TrainingSet:
    """Training prompts plus what the builder removed, per source (for the manifest)."""

    prompts: list[TrainPrompt]
    seed: int
    counts: dict[str, int] = field(default_factory=dict)
    removed_eval_matches: dict[str, int] = field(default_factory=dict)
    removed_duplicates: dict[str, int] = field(default_factory=dict)


def _user(text: str) -> Message:
    return {"role": "user", "content": text}


# ----------------------------------------------------------------------------------------------- normalising

_NOT_WORD = re.compile(r"[^\w\s]|_")


def normalise(text: str) -> str:
    """Lowercase, drop everything but letters, digits and whitespace, collapse whitespace: the leak-check form."""
    return " ".join(_NOT_WORD.sub("", text.lower()).split())


@dataclass(frozen=True)
class LeakIndex:
    """Normalised evaluation texts and their first PREFIX_CHARS characters."""

    exact: frozenset[str]
    prefixes: frozenset[str]

    @classmethod
    def of(cls, texts: Iterable[str]) -> LeakIndex:
        norms = [n for n in (normalise(t) for t in texts) if n]
        return cls(frozenset(norms), frozenset(n[:PREFIX_CHARS] for n in norms))

    def matches(self, text: str) -> bool:
        """True when `text` equals an evaluation text or starts like one, after normalising both."""
        n = normalise(text)
        return bool(n) and (n in self.exact or n[:PREFIX_CHARS] in self.prefixes)

    def leaks(self, prompt: TrainPrompt) -> bool:
        """True when any user turn of the prompt matches an evaluation text."""
        return any(m["role"] == "user" and self.matches(m["content"]) for m in prompt.messages)


# ----------------------------------------------------------------------------------------------- evaluation sets


def _eval_mtbench() -> list[EvalPrompt]:
    out = []
    for q in sources.mtbench_questions():
        text = q["turns"][0]
        out.append(EvalPrompt(f"mtbench-{q['question_id']}", "mt-bench", [_user(text)], text))
    return out


def _humaneval_message(prompt: str) -> str:
    return f"{HUMANEVAL_INSTRUCTION}\n\n```python\n{prompt}```"


def _eval_humaneval() -> list[EvalPrompt]:
    out = []
    for p in sources.humaneval_problems():
        text = _humaneval_message(p["prompt"])
        out.append(EvalPrompt(f"humaneval-{str(p['task_id']).rsplit('/', 1)[-1]}", "humaneval", [_user(text)], text))
    return out


def _eval_gsm() -> list[EvalPrompt]:
    items = sources.reasoning_gym_items("gsm_symbolic", EVAL_GSM_SIZE, EVAL_GSM_SEED)
    return [EvalPrompt(f"gsm_symbolic-{i}", "gsm_symbolic", [_user(it["question"])], it["question"])
            for i, it in items]


def _sharegpt_eval_conversations(progress: bool = False) -> list[sources.Conversation]:
    """The 200 held-out conversations: distinct first human turns of 10..2000 chars, sampled with a fixed seed."""
    lo, hi = EVAL_SHAREGPT_CHARS
    seen: set[str] = set()
    candidates = []
    for conv in sources.sharegpt_conversations(progress):
        first = conv.messages[0]
        if first["role"] != "user" or not lo <= len(first["content"]) <= hi:
            continue
        key = normalise(first["content"])
        if key and key not in seen:
            seen.add(key)
            candidates.append(conv)
    return Random(EVAL_SHAREGPT_SEED).sample(candidates, min(EVAL_SHAREGPT_SIZE, len(candidates)))


def _eval_sharegpt() -> list[EvalPrompt]:
    out = []
    for conv in _sharegpt_eval_conversations():
        text = conv.messages[0]["content"]
        out.append(EvalPrompt(f"sharegpt-{conv.id}", "sharegpt", [_user(text)], text))
    return out


_EVAL_LOADERS: dict[str, Callable[[], list[EvalPrompt]]] = {
    "mt-bench": _eval_mtbench, "humaneval": _eval_humaneval, "gsm_symbolic": _eval_gsm, "sharegpt": _eval_sharegpt,
}


def eval_prompts(workload: str, limit: int | None = None) -> list[EvalPrompt]:
    """The held-out prompts of one workload, in a fixed order (the first `limit` of them when given)."""
    if workload not in _EVAL_LOADERS:
        raise UnknownWorkloadError(f"unknown workload {workload!r}; known: {', '.join(EVAL_WORKLOADS)}")
    if limit is not None and limit < 0:
        raise DataError(f"limit must be >= 0, got {limit}")
    prompts = _EVAL_LOADERS[workload]()
    return prompts if limit is None else prompts[:limit]


def eval_leak_index(eval_sets: dict[str, list[EvalPrompt]] | None = None) -> LeakIndex:
    """Every text an evaluation could show the model: all four full sets, MT-Bench turn 2, bare HumanEval prompts."""
    eval_sets = {w: eval_prompts(w) for w in EVAL_WORKLOADS} if eval_sets is None else eval_sets
    texts = [p.text for w in EVAL_WORKLOADS for p in eval_sets[w]]
    texts += [turn for q in sources.mtbench_questions() for turn in q["turns"]]
    texts += [p["prompt"] for p in sources.humaneval_problems()]
    return LeakIndex.of(texts)


def sharegpt_held_out_ids(eval_set: list[EvalPrompt] | None = None) -> frozenset[str]:
    """Base ids of the ShareGPT dialogues the sharegpt evaluation set was drawn from (all their parts held out)."""
    eval_set = eval_prompts("sharegpt") if eval_set is None else eval_set
    return frozenset(sources.sharegpt_base_id(p.id.removeprefix("sharegpt-")) for p in eval_set)


# ----------------------------------------------------------------------------------------------- training sources

SourceStream = Callable[[int, frozenset[str], bool], Iterator[TrainPrompt]]


def _rng(seed: int, source: str) -> Random:
    return Random(f"weaver-train-{seed}-{source}")  # str seeds are hashed with sha512: stable across runs


def _alternating(messages: Iterable[Message]) -> list[Message]:
    """Messages from the first user turn on, cut where two turns of one role follow each other."""
    out: list[Message] = []
    for m in messages:
        if not out and m["role"] != "user":
            continue
        if out and out[-1]["role"] == m["role"]:
            break
        out.append(dict(m))
    return out


def _chars(messages: list[Message]) -> int:
    return sum(len(m["content"]) for m in messages)


def _sharegpt_first_turns(seed: int, held_out: frozenset[str], progress: bool) -> Iterator[TrainPrompt]:
    """First human turns of the dialogues not held out, in a seeded order."""
    convs = [c for c in sources.sharegpt_conversations(progress)
             if c.base_id not in held_out and c.messages[0]["role"] == "user"]
    _rng(seed, "sharegpt").shuffle(convs)
    lo, hi = TRAIN_FIRST_TURN_CHARS
    for conv in convs:
        text = conv.messages[0]["content"]
        if lo <= len(text) <= hi:
            yield TrainPrompt(f"sharegpt-{conv.id}", "sharegpt", [_user(text)])


def _sharegpt_multi_turn(seed: int, held_out: frozenset[str], progress: bool) -> Iterator[TrainPrompt]:
    """A random prefix of each multi-turn dialogue ending on a user turn, earliest pairs dropped to fit the cap."""
    convs = [c for c in sources.sharegpt_conversations(progress) if c.base_id not in held_out]
    rng = _rng(seed, "sharegpt_multi")
    rng.shuffle(convs)
    for conv in convs:
        msgs = _alternating(conv.messages)
        ends = list(range(2, len(msgs), 2))  # user turns with at least one assistant reply before them
        if not ends:
            continue
        end = rng.choice(ends)
        prefix = msgs[: end + 1]
        while _chars(prefix) > MAX_PROMPT_CHARS and len(prefix) > 3:
            prefix = prefix[2:]
        if _chars(prefix) <= MAX_PROMPT_CHARS:
            yield TrainPrompt(f"sharegpt-{conv.id}-u{end}", "sharegpt_multi", prefix)


def _train_seed_base(seed: int) -> int:
    """First reasoning-gym seed of a training seed, far above the evaluation range 10_001..10_200."""
    base = (seed + 1) * TRAIN_SEED_STRIDE
    assert base > EVAL_GSM_SEED + EVAL_GSM_SIZE, "training and evaluation reasoning-gym seeds must be disjoint"
    return base


def _generated(name: str, seed: int, pool: int) -> Iterator[tuple[int, dict]]:
    """(reasoning-gym seed, item) for the pool of one generator, a chunk at a time (items drawn lazily)."""
    base = _train_seed_base(seed)
    for start in range(0, pool, GENERATED_CHUNK):
        size = min(GENERATED_CHUNK, pool - start)
        for i, item in sources.reasoning_gym_items(name, size, base + start):
            yield base + start + i, item


def _gsm_symbolic(seed: int, held_out: frozenset[str], progress: bool) -> Iterator[TrainPrompt]:
    """GSM8K-style word problems at training seeds."""
    for s, item in _generated("gsm_symbolic", seed, GSM_POOL):
        yield TrainPrompt(f"gsm_symbolic-{s}", "gsm_symbolic", [_user(item["question"])])


def _math(seed: int, held_out: frozenset[str], progress: bool) -> Iterator[TrainPrompt]:
    """The MATH_GENERATORS interleaved, so that a small quota still sees each of them."""
    streams = [(name, _generated(name, seed, MATH_POOL)) for name in MATH_GENERATORS]
    while streams:
        alive = []
        for name, it in streams:
            nxt = next(it, None)
            if nxt is not None:
                alive.append((name, it))
                yield TrainPrompt(f"math-{name}-{nxt[0]}", "math", [_user(nxt[1]["question"])])
        streams = alive


def _codeio_prompt(rec: dict) -> str:
    return (f"{rec['task_description'].strip()}\n\n{rec['input_output_spec'].strip()}\n\n"
            "Write a Python function `main_solution` with these inputs and outputs. "
            "Reply with the code in a ```python block.")


def _codeio(seed: int, held_out: frozenset[str], progress: bool) -> Iterator[TrainPrompt]:
    """CodeI/O tasks as implement-this-function prompts, in a seeded order."""
    records = list(enumerate(sources.codeio_records()))
    _rng(seed, "codeio").shuffle(records)
    for i, rec in records:
        yield TrainPrompt(f"codeio-{i}", "codeio", [_user(_codeio_prompt(rec))])


def _stdlib_code(seed: int, held_out: frozenset[str], progress: bool) -> Iterator[TrainPrompt]:
    """Write-this-function tasks from the CPython standard library, in a seeded order."""
    tasks = sources.stdlib_code_tasks(progress)
    _rng(seed, "stdlib_code").shuffle(tasks)
    for task in tasks:
        yield TrainPrompt(f"stdlib-{task.id}", "stdlib_code", [_user(task.prompt)])


def _stdlib_stub(seed: int, held_out: frozenset[str], progress: bool) -> Iterator[TrainPrompt]:
    """Complete-this-function tasks from stdlib stubs (signature and docstring), in a seeded order: the
    reply copies the stub, then writes the body, as chat models answer code-completion requests."""
    stubs = sources.stdlib_function_stubs(progress)
    rng = _rng(seed, "stdlib_stub")
    rng.shuffle(stubs)
    for stub in stubs:
        text = f"{rng.choice(STUB_INSTRUCTIONS)}\n\n```python\n{stub.prompt}```"
        yield TrainPrompt(f"stub-{stub.id}", "stdlib_stub", [_user(text)])


# One stream per training source; a test swaps one out to inject evaluation prompts and watch them being removed.
SOURCE_STREAMS: dict[str, SourceStream] = {
    "sharegpt": _sharegpt_first_turns, "sharegpt_multi": _sharegpt_multi_turn, "gsm_symbolic": _gsm_symbolic,
    "math": _math, "codeio": _codeio, "stdlib_code": _stdlib_code,
    "stdlib_stub": _stdlib_stub,
}


# ----------------------------------------------------------------------------------------------- training builder


def _weights(mix: dict[str, float] | None) -> dict[str, float]:
    """Validated source weights, in TRAIN_SOURCES order, zero weights dropped."""
    mix = DEFAULT_MIX if mix is None else mix
    unknown = sorted(set(mix) - set(TRAIN_SOURCES))
    if unknown:
        raise DataError(f"unknown training source(s) {', '.join(unknown)}; known: {', '.join(TRAIN_SOURCES)}")
    if any(not math.isfinite(w) or w < 0 for w in mix.values()):
        raise DataError(f"mix weights must be finite and >= 0, got {mix}")
    weights = {s: float(mix[s]) for s in TRAIN_SOURCES if mix.get(s, 0) > 0}
    if not weights:
        raise DataError("mix gives every training source weight 0")
    return weights


def _split(total: int, weights: dict[str, float]) -> dict[str, int]:
    """Largest-remainder split of `total` in proportion to `weights` (ties go to the earlier source)."""
    norm = sum(weights.values())
    exact = {s: total * w / norm for s, w in weights.items()}
    quotas = {s: int(x) for s, x in exact.items()}
    order = sorted(weights, key=lambda s: (-(exact[s] - quotas[s]), list(weights).index(s)))
    for s in order[: total - sum(quotas.values())]:
        quotas[s] += 1
    return quotas


def _dedup_key(prompt: TrainPrompt) -> str:
    return normalise("\n".join(f"{m['role']}: {m['content']}" for m in prompt.messages))


def build_training_set(seed: int = 0, max_prompts: int | None = None, mix: dict[str, float] | None = None,
                       progress: bool = False) -> TrainingSet:
    """Training prompts plus per-source counts; see `build_training_prompts`."""
    if seed < 0:
        raise DataError(f"seed must be >= 0, got {seed}")
    if max_prompts is not None and max_prompts < 0:
        raise DataError(f"max_prompts must be >= 0, got {max_prompts}")
    weights = _weights(mix)
    if progress:
        sources.sharegpt_conversations(progress=True)  # the slowest read: parse it under a progress bar first
    eval_sets = {w: eval_prompts(w) for w in EVAL_WORKLOADS}
    leak = eval_leak_index(eval_sets)
    held_out = sharegpt_held_out_ids(eval_sets["sharegpt"])
    streams = {s: SOURCE_STREAMS[s](seed, held_out, progress) for s in weights}
    taken: dict[str, list[TrainPrompt]] = {s: [] for s in weights}
    leaks: Counter[str] = Counter()
    dups: Counter[str] = Counter()
    seen: set[str] = set()

    def take(source: str, n: float) -> bool:
        """Accept up to n more prompts of `source`; False when the source ran dry first."""
        got = 0
        while got < n:
            prompt = next(streams[source], None)
            if prompt is None:
                return False
            if leak.leaks(prompt):
                leaks[source] += 1
                continue
            key = _dedup_key(prompt)
            if key in seen:
                dups[source] += 1
                continue
            seen.add(key)
            taken[source].append(prompt)
            got += 1
        return True

    if max_prompts is None:
        for s in weights:
            take(s, math.inf)
    else:
        active = dict(weights)
        while active and (need := max_prompts - sum(map(len, taken.values()))) > 0:
            # A source that runs dry leaves the loop; its shortfall is split among the others next time round.
            for s, q in _split(need, active).items():
                if not take(s, q):
                    del active[s]
    prompts = [p for s in weights for p in taken[s]]
    _rng(seed, "shuffle").shuffle(prompts)
    return TrainingSet(prompts=prompts, seed=seed, counts={s: len(taken[s]) for s in weights},
                       removed_eval_matches=dict(leaks), removed_duplicates=dict(dups))


def build_training_prompts(seed: int = 0, max_prompts: int | None = None,
                           mix: dict[str, float] | None = None) -> list[TrainPrompt]:
    """Deterministic, shuffled, de-duplicated training prompts with no evaluation prompt among them.

    `mix` weights the sources (default DEFAULT_MIX; a source left out gets 0). With `max_prompts` the result has
    that many prompts split by weight (a source that runs dry hands its share to the others); without it every
    source gives all it has (gsm_symbolic GSM_POOL items, each math generator MATH_POOL).
    """
    return build_training_set(seed, max_prompts, mix).prompts


# ----------------------------------------------------------------------------------------------- files


def write_prompts(path: str | Path, prompts: Iterable[EvalPrompt | TrainPrompt]) -> Path:
    """Write prompts as JSONL, one object with the dataclass's fields per line."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w", encoding="utf-8") as fh:
            for p in prompts:
                fh.write(json.dumps(dataclasses.asdict(p), ensure_ascii=False) + "\n")
    except OSError as exc:
        raise DataError(f"cannot write {path}: {exc.strerror or exc}") from None
    return path


_FIELDS = {frozenset(f.name for f in dataclasses.fields(c)): c for c in (EvalPrompt, TrainPrompt)}


def read_prompts(path: str | Path) -> list[EvalPrompt | TrainPrompt]:
    """Read a file written by `write_prompts` (each line becomes an EvalPrompt or a TrainPrompt by its fields)."""
    path = Path(path)
    try:
        # split on "\n" only: json.dumps(ensure_ascii=False) leaves U+2028, U+0085, ... raw, and splitlines cuts there
        lines = path.read_text(encoding="utf-8").split("\n")
    except OSError as exc:
        raise DataError(f"cannot read {path}: {exc.strerror or exc}") from None
    out = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
            out.append(_FIELDS[frozenset(obj)](**obj))
        except (json.JSONDecodeError, KeyError, TypeError):
            raise DataError(f"{path}:{n}: not a prompt record written by write_prompts") from None
    return out


def write_eval_sets(out_dir: str | Path) -> dict[str, Path]:
    """Write `<out_dir>/<workload>.jsonl` for every evaluation workload."""
    out_dir = Path(out_dir)
    return {w: write_prompts(out_dir / f"{w}.jsonl", eval_prompts(w)) for w in EVAL_WORKLOADS}


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_data_dir(out_dir: str | Path, seed: int = 0, max_prompts: int | None = None,
                   mix: dict[str, float] | None = None, progress: bool = False) -> dict:
    """Write train_prompts.jsonl, eval/<workload>.jsonl and manifest.json under `out_dir`; return the manifest."""
    out_dir = Path(out_dir)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DataError(f"cannot create {out_dir}: {exc.strerror or exc}") from None
    training = build_training_set(seed, max_prompts, mix, progress)
    files = {"train_prompts.jsonl": write_prompts(out_dir / "train_prompts.jsonl", training.prompts)}
    eval_counts = {}
    for w, path in write_eval_sets(out_dir / "eval").items():
        files[f"eval/{w}.jsonl"] = path
        eval_counts[w] = len(read_prompts(path))
    manifest = {
        "seed": seed,
        "max_prompts": max_prompts,
        "mix": _weights(mix),
        "train_prompts": len(training.prompts),
        "counts": training.counts,
        "removed_eval_matches": training.removed_eval_matches,
        "removed_duplicates": training.removed_duplicates,
        "eval_counts": eval_counts,
        "sha256": {name: _sha256(path) for name, path in files.items()},
    }
    try:
        (out_dir / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    except OSError as exc:
        raise DataError(f"cannot write {out_dir / 'manifest.json'}: {exc.strerror or exc}") from None
    return manifest
